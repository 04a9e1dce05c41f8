/**
 * SQL Server behaviour checked without a server: exact (binary, trailing-space-exact) topic,
 * source and label filters; seeks for replays that list their rows; the inbox insert's id chosen
 * once and its payload one JSON value; lengths as each dialect's columns count them; a leftover
 * transaction on a pooled connection; a stale socket after a freeze; SNAPSHOT update conflicts;
 * `migrate` without a request timeout; a reclaim that fails gives its turn back; the pull lease
 * floor. Stand-in pools answer like `mssql` would; SQL text is inspected as sent.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import sql from 'mssql';
import { parseConfig } from '../../lib/config/load-config.ts';
import { PayloadRejectedError, TransientDatabaseError, ValidationError } from '../../lib/errors.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { extractMessageFields } from '../../lib/inbox/extract-fields.ts';
import { createHttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { createSqsReceiver } from '../../lib/inbox/sqs-receiver.ts';
import type { SQSRecord } from 'aws-lambda';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { InboxRejectionError } from '../../lib/inbox/inbox-rejection.ts';
import { sqlServerCallerOutboxInsert } from '../../lib/db/sqlserver/caller-statements.ts';
import { buildDeadSearch } from '../../lib/db/sqlserver/console-queries.ts';
import { LEFTOVER_TRANSACTION, mapMssqlError } from '../../lib/db/sqlserver/error-map.ts';
import { buildFencedBatch, runFencedBatch } from '../../lib/db/sqlserver/fenced-batch.ts';
import { buildInboxReplay } from '../../lib/db/sqlserver/inbox-replay.ts';
import { buildInboxInsert, inboxInsert } from '../../lib/db/sqlserver/inbox-queries.ts';
import { mssqlMigrations } from '../../lib/db/sqlserver/migrations.ts';
import { dbNowPlusMs, runStatement, statementText, type MssqlStatement } from '../../lib/db/sqlserver/mssql-pool.ts';
import { buildOutboxReclaim, buildOutboxReplay, buildOutboxReplayBounded, buildOutboxReplayTopics, outboxReplay, sqlServerOutboxInsert } from '../../lib/db/sqlserver/outbox-queries.ts';
import { buildPullClaim, PULL_LEASE_FLOOR_MS } from '../../lib/db/sqlserver/pull-queries.ts';
import { buildOutboxReplayPreview } from '../../lib/db/sqlserver/replay-preview.ts';
import { MIGRATE_REQUEST_TIMEOUT_MS, SqlServerDriver } from '../../lib/db/sqlserver/sqlserver-driver.ts';
import { names } from './statement-shapes.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

type Answer = { recordset?: unknown[]; recordsets?: unknown[][] } | { error: unknown } | ((inputs: Map<string, unknown>) => { recordset: unknown[] });

/** A pool (`instanceof sql.ConnectionPool`) answering each request with the next answer, recording texts and bound values. */
function fakePool(answers: Answer[], poolOptions: { idleTimeoutMillis: number; max: number } = { idleTimeoutMillis: 30_000, max: 2 }) {
  const texts: string[] = [];
  const inputs: Array<Map<string, unknown>> = [];
  const request = () => {
    const bound = new Map<string, unknown>();
    const run = async (text: string) => {
      texts.push(text);
      inputs.push(bound);
      const answer = answers.shift();
      if (answer === undefined) throw new Error('no answer left');
      if (typeof answer === 'function') return { ...answer(bound), recordsets: [], rowsAffected: [] };
      if ('error' in answer) throw answer.error;
      return { recordset: answer.recordset ?? answer.recordsets?.[0] ?? [], recordsets: answer.recordsets ?? [answer.recordset ?? []], rowsAffected: [] };
    };
    return {
      input(name: string, _type: unknown, value: unknown) {
        bound.set(name, value);
      },
      query: run,
      batch: run,
    };
  };
  const pool = Object.create(sql.ConnectionPool.prototype) as sql.ConnectionPool;
  Object.defineProperty(pool, 'request', { value: request });
  Object.defineProperty(pool, 'connected', { value: true });
  Object.defineProperty(pool, 'config', { value: { requestTimeout: 30_000, pool: poolOptions } });
  return { pool, texts, inputs };
}

/** What `mssql` rejects with when the socket was found reset. */
const reset = { name: 'RequestError', code: 'ESOCKET', message: 'Connection lost - read ECONNRESET', originalError: { code: 'ECONNRESET', message: 'read ECONNRESET' } };
/** Settings to make a fake pool count as idle past its reap time after one statement. */
const ALWAYS_STALE = { idleTimeoutMillis: -1, max: 2 };
const ping: MssqlStatement = { text: 'SELECT 1 AS one;', params: [] };

describe('SQL Server filters match topics, sources and labels exactly', () => {
  const binary = /EXISTS \(SELECT 1 FROM OPENJSON\(@p_topics\) WITH \(value NVARCHAR\(255\) '\$'\) AS f\s+WHERE f\.value = topic COLLATE Latin1_General_100_BIN2 AND DATALENGTH\(f\.value\) = DATALENGTH\(topic\)\)/;

  it('a replay or preview by topic compares binary and by byte length, not under the default collation (Order.Paid is not order.paid)', () => {
    const filter = { topics: ['order.paid'], states: ['dead' as const] };
    assert.match(buildOutboxReplay(names, filter).text, binary);
    assert.match(buildOutboxReplayBounded(names, filter, 10).text, binary);
    assert.match(buildOutboxReplayPreview(names, filter, 10).text, binary);
    assert.doesNotMatch(buildOutboxReplay(names, filter).text, /topic IN \(/);
    assert.match(buildOutboxReplay(names, { topicPatterns: ['order.*'], states: ['dead'] }, ['order.paid']).text, /OPENJSON\(@p_matched_topics\) WITH \(value NVARCHAR\(255\) '\$'\) AS f\s+WHERE f\.value = topic COLLATE Latin1_General_100_BIN2/);
  });

  it('the topics a route pattern is matched against are listed spelling by spelling (binary, with their byte length)', () => {
    assert.match(buildOutboxReplayTopics(names, ['dead']).text, /^SELECT DISTINCT topic COLLATE Latin1_General_100_BIN2 AS topic, DATALENGTH\(topic\) AS topic_bytes/);
  });

  it('an inbox requeue by source is trailing-space-exact; the console filters and groups by the exact label', () => {
    assert.match(buildInboxReplay(names, { sources: ['s'] }).text, /WHERE f\.value = source COLLATE Latin1_General_100_BIN2 AND DATALENGTH\(f\.value\) = DATALENGTH\(source\)/);
    const search = buildDeadSearch(names, 'outbox', { scanLimit: 10, limit: 5, label: 'order.paid' }).text;
    assert.match(search, /label COLLATE Latin1_General_100_BIN2 = @p_label AND DATALENGTH\(label\) = DATALENGTH\(@p_label\)/);
  });
});

describe('SQL Server outbox keys of spaces only', () => {
  it('enqueue refuses a key of spaces only (SQL Server compares it equal to the empty, keyless key) and accepts a key with trailing spaces', async () => {
    const message = (key: string) => ({ topic: 't', payload: {}, key, headers: {} });
    assert.throws(() => sqlServerCallerOutboxInsert(names, message('   '), { maxAttempts: 5 }), (e: unknown) => e instanceof ValidationError && e.field === 'message.key' && /spaces only/.test(e.message));
    assert.ok(sqlServerCallerOutboxInsert(names, message('order-1 '), { maxAttempts: 5 }).id);
    const tx = { request: () => assert.fail('nothing is sent'), begin: async () => {} };
    await assert.rejects(sqlServerOutboxInsert({ schema: 'dbo', table: 'outbox' }, tx, message(' '), { maxAttempts: 5 }), ValidationError);
  });
});

describe('SQL Server replays that list their rows seek them', () => {
  it('a replay, bounded replay or preview by ids or as read seeks the primary key; other filters carry no seek hint', () => {
    const seek = /WITH \(ROWLOCK, FORCESEEK \(\[outbox_pkey\] \(id\)\)\)/;
    const id = '11111111-2222-4333-8444-555555555555';
    assert.match(buildOutboxReplay(names, { ids: [id] }).text, seek);
    assert.equal(buildOutboxReplayBounded(names, { ids: [id] }, 10).text.match(/FORCESEEK \(\[outbox_pkey\] \(id\)\)/g)?.length, 1, 'the UPDATE, which is the count');
    assert.match(buildOutboxReplay(names, { asRead: [{ id, updatedAtMs: 1 }] }).text, seek);
    assert.equal(buildOutboxReplayPreview(names, { ids: [id] }, 5).text.match(/\[dbo\]\.\[outbox\] WITH \(FORCESEEK \(\[outbox_pkey\] \(id\)\)\)/g)?.length, 2);
    assert.match(buildInboxReplay(names, { ids: [id] }).text, /FORCESEEK \(\[inbox_pkey\] \(id\)\)/);
    assert.doesNotMatch(buildOutboxReplay(names, { topics: ['t'] }).text, /FORCESEEK/);
  });
});

describe('SQL Server inbox insert', () => {
  const message = { source: 's', idempotencyKey: 'k', payload: { a: 1 }, consumption: 'push' as const };

  it('a run again after the insert committed (its read-back was a deadlock victim) reads the row back as its own: stored, not duplicate', async () => {
    let stored: unknown;
    // Answers as the batch would: the INSERT autocommits, then the read-back is chosen as deadlock victim.
    const insertCommittedReadBackDeadlocked = (bound: Map<string, unknown>) => {
      stored = bound.get('p_id');
      throw { number: 1205, message: 'Transaction (Process ID 61) was deadlocked on lock resources with another process and has been chosen as the deadlock victim. Rerun the transaction.' };
    };
    // The row of the key carries the id of the insert that stored it.
    const readBack = (bound: Map<string, unknown>) => ({ recordset: [{ id: String(stored), duplicate: stored !== bound.get('p_id') }] });
    const { pool, texts } = fakePool([insertCommittedReadBackDeadlocked as unknown as Answer, readBack]);
    const result = await inboxInsert(pool, names, message);
    assert.equal(texts.length, 2, 'the insert ran again');
    assert.deepEqual(result, { id: String(stored).toLowerCase(), duplicate: false });
  });

  it('refuses a payload text that is not one JSON value (1,2), before any round trip, naming the key; the statement checks it too', async () => {
    const { pool, texts } = fakePool([]);
    await assert.rejects(inboxInsert(pool, names, { ...message, payloadText: '1,2' }), (e: unknown) => e instanceof ValidationError && e.field === 'message.payloadText' && e.message.includes('s/k'));
    assert.equal(texts.length, 0);
    const text = buildInboxInsert(names, { ...message, payloadText: '1' }, '00000000-0000-4000-8000-000000000000').text;
    assert.match(text, /^IF ISJSON\(CONCAT\(N'\[', @p_payload, N'\]'\)\) = 0 OR ISJSON\(CONCAT\(N'\{"v":', @p_payload, N'\}'\)\) = 0\s+THROW 51003/);
    assert.ok(text.indexOf('THROW 51003') < text.indexOf('INSERT INTO'));
  });

  it('the statement\'s one-JSON-value check (THROW 51003) reaches the caller as PayloadRejectedError, which the receivers treat as an invalid body', async () => {
    const refused = { name: 'RequestError', number: 51003, message: 'queuebox: the inbox payload is not one JSON value' };
    const { pool, texts } = fakePool([{ error: refused }]);
    await assert.rejects(inboxInsert(pool, names, { ...message, payloadText: '{"n":1}' }), (e: unknown) => e instanceof PayloadRejectedError && e.code === '51003' && /not one JSON value/.test(e.message));
    assert.equal(texts.length, 1, 'not run again');
  });

  it('refuses a key longer than 255 UTF-16 code units (200 emoji) before any round trip, naming the field', async () => {
    const { pool, texts } = fakePool([]);
    const emoji = '\u{1F600}'.repeat(200);
    await assert.rejects(inboxInsert(pool, names, { ...message, idempotencyKey: emoji }), (e: unknown) => e instanceof ValidationError && e.field === 'message.idempotencyKey' && /UTF-16/.test(e.message));
    assert.equal(texts.length, 0);
  });
});

describe('receivers count key lengths as the dialect\'s columns do', () => {
  const source = parseConfig({ database: { type: 'sqlserver', url: 'mssql://x@h/db' }, inbox: { sources: { s: { type: 'http', path: '/s', auth: { type: 'none' } } } } }).inbox.sources['s']!;
  const emoji = '\u{1F600}'.repeat(200);

  it('200 emoji fit PostgreSQL\'s varchar(255) (code points) and are rejected for SQL Server\'s NVARCHAR(255) (400 UTF-16 units) with a clear reason', () => {
    assert.equal(extractMessageFields('s', source, {}, { idempotencyKey: emoji }).idempotencyKey, emoji);
    assert.equal(extractMessageFields('s', source, {}, { idempotencyKey: emoji }, 'postgres').idempotencyKey, emoji);
    assert.throws(
      () => extractMessageFields('s', source, {}, { idempotencyKey: emoji }, 'sqlserver'),
      (e: unknown) => e instanceof InboxRejectionError && e.reason === 'invalid_field' && /at most 255 UTF-16 code units .* \(got 400\)/.test(e.message),
    );
    assert.equal(extractMessageFields('s', source, {}, { idempotencyKey: '\u{1F600}'.repeat(127) }, 'sqlserver').idempotencyKey.length, 254);
  });

  it('the HTTP receiver on SQL Server answers 400 naming the limit, and stores nothing, for a key of 200 emoji', async () => {
    const config = parseConfig({ database: { type: 'sqlserver', url: 'mssql://x@h/db' }, inbox: { sources: { s: { type: 'http', path: '/s', auth: { type: 'none' } } } } });
    const stored: unknown[] = [];
    const driver = { dialect: 'sqlserver', inboxInsert: async (m: unknown) => (stored.push(m), { id: 'x', duplicate: false }) } as unknown as Driver;
    const receive = createHttpReceiver({ config, driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env: {} });
    const metrics = new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
    const answer = await receive(apiGatewayV2Event(`${config.inbox.basePath}/s`, '{"a":1}', { 'x-idempotency-key': emoji }), metrics);
    assert.equal(answer.statusCode, 400);
    assert.match(String(answer.body), /idempotency key must be at most 255 UTF-16 code units/);
    assert.deepEqual(stored, []);
    const fits = await receive(apiGatewayV2Event(`${config.inbox.basePath}/s`, '{"a":1}', { 'x-idempotency-key': '\u{1F600}'.repeat(100) }), metrics);
    assert.equal(fits.statusCode, 202);
    assert.equal(stored.length, 1);
  });

  it('the SQS receiver on SQL Server stores a record with a key of 200 emoji dead with the reason, under the message id', async () => {
    const config = parseConfig({ database: { type: 'sqlserver', url: 'mssql://x@h/db' }, inbox: { sources: { events: { type: 'sqs' } } } });
    const stored: Array<{ idempotencyKey: string; deadReason?: string }> = [];
    const driver = { dialect: 'sqlserver', inboxInsert: async (m: { idempotencyKey: string }) => (stored.push(m), { id: 'x', duplicate: false }) } as unknown as Driver;
    const receive = createSqsReceiver({ config, driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }) });
    const record = {
      messageId: 'm-1', receiptHandle: 'rh', body: '{"a":1}', md5OfBody: '', eventSource: 'aws:sqs', awsRegion: 'eu-west-1',
      eventSourceARN: 'arn:aws:sqs:eu-west-1:000000000000:events',
      attributes: { ApproximateReceiveCount: '1', SentTimestamp: '0', SenderId: 's', ApproximateFirstReceiveTimestamp: '0' },
      messageAttributes: { 'x-idempotency-key': { stringValue: emoji, dataType: 'String' } },
    } as SQSRecord;
    const answer = await receive({ Records: [record] }, new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} }));
    assert.deepEqual(answer.batchItemFailures, []);
    assert.equal(stored.length, 1);
    assert.equal(stored[0]!.idempotencyKey, 'rejected:m-1', 'a record stored dead is keyed by its message id');
    assert.match(stored[0]!.deadReason ?? '', /at most 255 UTF-16 code units/);
  });
});

describe('SQL Server leftover transaction on a pooled connection', () => {
  it('a statement on the pool first rolls back a transaction its connection still holds and refuses to run in it; QueueBox\'s own transaction expects one level; a caller\'s is left alone', () => {
    const pool = new sql.ConnectionPool({ server: 'unused' });
    assert.match(statementText(pool, ping), /IF @@TRANCOUNT > 0\s+BEGIN\s+ROLLBACK TRANSACTION;\s+THROW 51002, N'queuebox: a transaction left open on this pooled connection was rolled back; the statement did not run', 1;\s+END;\s+SELECT 1 AS one;$/);
    assert.equal(statementText(new sql.Transaction(pool), ping), ping.text);
  });

  it('the refusal is transient even when mssql reports the 266 that follows it, and a fenced write runs again on a clean connection', async () => {
    const refused = { number: 266, message: 'Transaction count after EXECUTE indicates a mismatching number of BEGIN and COMMIT statements.', precedingErrors: [{ number: LEFTOVER_TRANSACTION, message: 'queuebox: a transaction left open…' }] };
    const mapped = mapMssqlError(refused);
    assert.ok(mapped instanceof TransientDatabaseError && mapped.code === String(LEFTOVER_TRANSACTION));
    const { pool, texts } = fakePool([{ error: refused }, { recordset: [{ id: 'ABC' }] }]);
    assert.deepEqual(await runFencedBatch(pool, buildFencedBatch(names.outbox, 'sent', [{ id: 'x', token: 'y' }])), ['abc']);
    assert.equal(texts.length, 2);
  });
});

describe('SQL Server stale sockets after a freeze', () => {
  it('a statement on a pool idle past its reap time runs again when the socket was found dead', async () => {
    const { pool, texts } = fakePool([{ recordset: [{ one: 1 }] }, { error: reset }, { recordset: [{ one: 2 }] }], ALWAYS_STALE);
    await runStatement(pool, ping);
    assert.deepEqual((await runStatement<{ one: number }>(pool, ping)).recordset, [{ one: 2 }]);
    assert.equal(texts.length, 3);
  });

  it('each connection the pool may hold fails at most once; then the error is reported', async () => {
    const { pool, texts } = fakePool([{ recordset: [] }, { error: reset }, { error: reset }, { error: reset }], ALWAYS_STALE);
    await runStatement(pool, ping);
    await assert.rejects(runStatement(pool, ping), (e: unknown) => e instanceof TransientDatabaseError && e.code === 'ESOCKET');
    assert.equal(texts.length, 4, 'the first run and one per pooled connection (max 2)');
  });

  it('runs nothing again after recent use, after a timeout (the statement may have run), or for a pool never used', async () => {
    const recent = fakePool([{ recordset: [] }, { error: reset }]);
    await runStatement(recent.pool, ping);
    await assert.rejects(runStatement(recent.pool, ping), TransientDatabaseError);
    assert.equal(recent.texts.length, 2);
    const timeout = fakePool([{ recordset: [] }, { error: { name: 'RequestError', code: 'ETIMEOUT', message: 'Timeout: Request failed to complete in 30000ms' } }], ALWAYS_STALE);
    await runStatement(timeout.pool, ping);
    await assert.rejects(runStatement(timeout.pool, ping), (e: unknown) => e instanceof TransientDatabaseError && e.code === 'ETIMEOUT');
    assert.equal(timeout.texts.length, 2);
    const fresh = fakePool([{ error: reset }], ALWAYS_STALE);
    await assert.rejects(runStatement(fresh.pool, ping), TransientDatabaseError);
  });

  it('a replay is not run again (a replayed row delivered again at once would match its filter again)', async () => {
    const { pool, texts } = fakePool([{ recordset: [] }, { error: reset }, { recordset: [{ replayed: 1 }] }], ALWAYS_STALE);
    await runStatement(pool, ping);
    await assert.rejects(outboxReplay(pool, names, { ids: ['11111111-2222-4333-8444-555555555555'] }), (e: unknown) => e instanceof TransientDatabaseError && e.code === 'ESOCKET');
    assert.equal(texts.length, 2);
  });
});

describe('SQL Server SNAPSHOT isolation', () => {
  it('an update conflict (3960) in a caller\'s transaction says what happened and what to do', () => {
    const mapped = mapMssqlError({ number: 3960, message: "Snapshot isolation transaction aborted due to update conflict. You cannot use snapshot isolation to access table 'dbo.inbox' directly or indirectly in database 'app' to update, delete, or insert the row that has been modified or deleted by another transaction." });
    assert.ok(mapped instanceof TransientDatabaseError && mapped.code === '3960');
    assert.match(mapped.message, /run it again, and run the transactions that call pullComplete or enqueue under READ COMMITTED/);
  });
});

describe('SQL Server migrate', () => {
  it('runs its transaction with no request timeout (an index build on a large table outlasts 30 s)', async () => {
    const { pool, texts } = fakePool([
      { recordset: [{ level: 150 }] },
      ...Array.from({ length: 3 }, () => ({ recordset: [] })),
      { recordset: mssqlMigrations.map((m) => ({ version: m.version })) },
    ]);
    const seen: unknown[] = [];
    const tx = { begin: async () => {}, commit: async () => {}, rollback: async () => {}, request: () => (pool as unknown as { request(): unknown }).request() };
    Object.defineProperty(pool, 'transaction', { value: (overrides: unknown) => (seen.push(overrides), tx) });
    const config = parseConfig({ database: { type: 'sqlserver', url: 'mssql://x@h/db' } });
    assert.deepEqual(await new SqlServerDriver({ config, url: 'mssql://x@h/db', pool }).migrate(), { applied: [] });
    assert.equal(MIGRATE_REQUEST_TIMEOUT_MS, 0);
    assert.deepEqual(seen, [{ requestTimeout: 0 }]);
    assert.ok(texts.length >= 5);
  });
});

describe('SQL Server reclaim', () => {
  const text = buildOutboxReclaim(names, 60_000).text;

  it('a reclaim that fails gives its turn back (unless another caller moved the gate since) and reports the error', () => {
    assert.match(text, /SET @v_previous = last_run_at, last_run_at = @v_taken/);
    assert.match(text, /IF @v_gate_rows > 0\s+BEGIN\s+BEGIN TRY\s+DECLARE @v_chunk[^]+FROM @v_moved;\s+END TRY\s+BEGIN CATCH\s+IF XACT_STATE\(\) <> 0 ROLLBACK TRANSACTION;/);
    assert.match(text, /IF @v_previous IS NULL\s+DELETE FROM \[dbo\]\.\[queuebox_maintenance\] WHERE name = @p_gate_name AND last_run_at = @v_taken;/);
    assert.match(text, /ELSE\s+UPDATE \[dbo\]\.\[queuebox_maintenance\] SET last_run_at = @v_previous WHERE name = @p_gate_name AND last_run_at = @v_taken;\s+THROW;\s+END CATCH;/);
  });

  it('migration 12 indexes expired push leases apart from pull leases, matching the relay reclaim\'s predicate', () => {
    const migration = mssqlMigrations.find((m) => m.version === 12)!;
    assert.equal(mssqlMigrations.at(-1), migration);
    assert.match(migration.statements(names).join('\n'), /\[inbox_push_lease_idx\] ON \[dbo\]\.\[inbox\] \(lease_expires_at\) WHERE state = N''processing'' AND consumption = N''push''/);
  });
});

describe('SQL Server pull lease', () => {
  it('comes back with at least min(lease, 1 s) left on the database clock at the claim, to the millisecond, whatever the claim lock wait took', () => {
    const statement = buildPullClaim(names, { source: 's', limit: 5, leaseMs: 1500 });
    const fromStart = dbNowPlusMs('@p_lease_ms', '@v_claim_start');
    const floor = dbNowPlusMs('@p_lease_floor_ms');
    assert.ok(statement.text.includes(`lease_expires_at = CASE WHEN ${fromStart} > ${floor}\n                             THEN ${fromStart} ELSE ${floor} END`));
    assert.ok(floor.includes('DATEADD(millisecond,') && floor.endsWith('SYSUTCDATETIME()))'));
    const bound = (p: { leaseMs: number }) => buildPullClaim(names, { source: 's', limit: 5, ...p }).params.find((x) => x.name === 'p_lease_floor_ms')?.value;
    assert.equal(bound({ leaseMs: 1500 }), PULL_LEASE_FLOOR_MS);
    assert.equal(bound({ leaseMs: 400 }), 400);
    assert.doesNotMatch(statement.text, /GETUTCDATE|GETDATE|SYSDATETIME\(\)|CURRENT_TIMESTAMP/);
  });
});
