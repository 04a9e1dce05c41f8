/**
 * SQL Server driver behaviour that needs no server: what the driver does with the answers of a
 * stand-in pool (row order kept as SQL sorted it, deadlock retries, the inbox insert's retry),
 * error classes (Azure failover at login, a claim inside an open transaction), the compatibility
 * level check, the pool's connection check, and migration 5's re-collation.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import sql from 'mssql';
import { parseConfig } from '../../lib/config/load-config.ts';
import { FencedLockTimeoutError, QueueBoxError, TransientDatabaseError, UsageError } from '../../lib/errors.ts';
import { assertCompatibilityLevel, COMPATIBILITY_LEVEL_SQL } from '../../lib/db/sqlserver/compatibility-check.ts';
import { CLAIM_IN_OPEN_TRANSACTION, mapMssqlError } from '../../lib/db/sqlserver/error-map.ts';
import { buildFencedBatch, runFencedBatch } from '../../lib/db/sqlserver/fenced-batch.ts';
import { inboxInsert } from '../../lib/db/sqlserver/inbox-queries.ts';
import { FILTERED_INDEX_SET_OPTIONS, KEY_COLLATION, mssqlExpectedColumns, mssqlMigrations, ONLINE_INDEX_EDITIONS } from '../../lib/db/sqlserver/migrations.ts';
import { SqlServerDriver } from '../../lib/db/sqlserver/sqlserver-driver.ts';
import { DEADLOCK_ATTEMPTS, mssqlPoolConfig, retryDeadlocks } from '../../lib/db/sqlserver/mssql-pool.ts';
import { buildOutboxClaim, outboxClaimMany } from '../../lib/db/sqlserver/outbox-claim.ts';
import { pullClaimMany } from '../../lib/db/sqlserver/pull-queries.ts';
import { names } from './statement-shapes.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

type Answer = { recordset?: unknown[]; recordsets?: unknown[][] } | { error: unknown };

/** A pool (it passes `instanceof sql.ConnectionPool`) that answers each query with the next answer and records the texts. */
function standInPool(answers: Answer[]): { pool: sql.ConnectionPool; texts: string[] } {
  const texts: string[] = [];
  const request = () => ({
    input() {},
    async query(text: string) {
      texts.push(text);
      const answer = answers.shift();
      if (answer === undefined) throw new Error('no answer left');
      if ('error' in answer) throw answer.error;
      return { recordset: answer.recordset ?? answer.recordsets?.[0] ?? [], recordsets: answer.recordsets ?? [answer.recordset ?? []], rowsAffected: [] };
    },
  });
  const pool = Object.assign(Object.create(sql.ConnectionPool.prototype) as sql.ConnectionPool, { request });
  Object.defineProperty(pool, 'connected', { value: true });
  return { pool, texts };
}

const deadlock = { number: 1205, message: 'Transaction (Process ID 61) was deadlocked on lock resources with another process and has been chosen as the deadlock victim. Rerun the transaction.' };
const T0 = new Date('2026-01-01T00:00:00.000Z');

function inboxDbRow(id: string) {
  return { id, source: 's', idempotency_key: id, aggregate_id: null, event_type: null, payload: '{}', headers: '{}', correlation_id: null, attempt: 0, sequence: '1', scheduled_at: T0, created_at: T0, claim_token: 'AAAAAAAA-0000-4000-8000-000000000000', lease_expires_at: T0 };
}

describe('SQL Server claims keep the order SQL returned', () => {
  it('pullClaimMany returns a1, b1 as sorted by SQL, though both share a millisecond and b1 sorts first as a GUID string', async () => {
    const a1 = 'F0000000-0000-4000-8000-000000000001';
    const b1 = '00000000-0000-4000-8000-000000000002';
    const { pool, texts } = standInPool([{ recordset: [inboxDbRow(a1), inboxDbRow(b1)] }]);
    const rows = await pullClaimMany(pool, names, { source: 's', limit: 2, leaseMs: 1000 });
    assert.deepEqual(rows.map((r) => r.id), [a1.toLowerCase(), b1.toLowerCase()]);
    assert.equal(texts.length, 1, 'one round trip: the claim transaction begins and commits inside the batch');
    assert.match(texts[0]!, /ORDER BY claim_priority, scheduled_at, created_at, id;$/);
  });

  it('outboxClaimMany does not re-sort in JavaScript', async () => {
    const row = (id: string, sequence: string) => ({ id, topic: 't', key: null, payload: '{}', headers: '{}', attempt: 0, max_attempts: 5, sequence, replay_count: 0, created_at: T0, claim_token: id, lease_expires_at: T0 });
    const { pool } = standInPool([{ recordset: [row('A', '9'), row('B', '10')] }]);
    assert.deepEqual((await outboxClaimMany(pool, names, { limit: 2, leaseMs: 1000 })).map((r) => r.sequence), ['9', '10']);
  });
});

describe('SQL Server deadlock retry', () => {
  const statement = buildFencedBatch(names.outbox, 'sent', [{ id: 'x', token: 'y' }]);

  it('a fenced write chosen as deadlock victim runs again on the pool and returns what the fence decided', async () => {
    const { pool, texts } = standInPool([{ error: deadlock }, { error: deadlock }, { recordset: [{ id: 'ABC' }] }]);
    assert.deepEqual(await runFencedBatch(pool, statement), ['abc']);
    assert.equal(texts.length, 3);
  });

  it(`gives up after ${DEADLOCK_ATTEMPTS} attempts with the transient error`, async () => {
    const { pool, texts } = standInPool(Array.from({ length: DEADLOCK_ATTEMPTS }, () => ({ error: deadlock })));
    await assert.rejects(runFencedBatch(pool, statement), (e: unknown) => e instanceof TransientDatabaseError && e.code === '1205');
    assert.equal(texts.length, DEADLOCK_ATTEMPTS);
  });

  it('retries nothing but deadlocks: a lock timeout (1222) is reported at once', async () => {
    let calls = 0;
    await assert.rejects(
      retryDeadlocks(async () => {
        calls += 1;
        throw mapMssqlError({ number: 1222, message: 'Lock request time out period exceeded.' });
      }),
      TransientDatabaseError,
    );
    assert.equal(calls, 1);
  });

  it('a fenced write whose row stayed locked past the lock timeout (1222) changed nothing: FencedLockTimeoutError at once, as on PostgreSQL', async () => {
    const { pool, texts } = standInPool([{ error: { number: 1222, message: 'Lock request time out period exceeded.' } }, { recordset: [{ id: 'ABC' }] }]);
    await assert.rejects(runFencedBatch(pool, statement), (e: unknown) => e instanceof FencedLockTimeoutError && /stayed locked by another transaction for the lock timeout \(10000 ms\); nothing was written/.test(e.message));
    assert.equal(texts.length, 1, 'not sent again');
  });
});

describe('SQL Server inbox insert', () => {
  it('runs again when retention deleted the duplicate row between the check and the read-back', async () => {
    const { pool, texts } = standInPool([{ recordset: [] }, { recordset: [{ id: 'ABC', duplicate: false }] }]);
    assert.deepEqual(await inboxInsert(pool, names, { source: 's', idempotencyKey: 'k', payload: {}, consumption: 'push' }), { id: 'abc', duplicate: false });
    assert.equal(texts.length, 2);
  });

  it('reports a clear error naming the key when no attempt stores or finds the row', async () => {
    const { pool } = standInPool([{ recordset: [] }, { recordset: [] }, { recordset: [] }]);
    await assert.rejects(inboxInsert(pool, names, { source: 'src', idempotencyKey: 'key-1', payload: {}, consumption: 'push' }), (e: unknown) => e instanceof UsageError && e.message.includes('src/key-1'));
  });
});

describe('SQL Server error classes', () => {
  it('Azure failover and throttling at login are transient; a wrong password is not', () => {
    const login = (message: string, extra: Record<string, unknown> = {}) => ({ name: 'ConnectionError', code: 'ELOGIN', message, originalError: { code: 'ELOGIN', message, ...extra } });
    for (const message of [
      "Database 'orders' on server 'db.database.windows.net' is not currently available. Please retry the connection later.",
      'The service has encountered an error processing your request. Please try again.',
      'The service is currently busy. Retry the request after 10 seconds.',
      'Cannot process request. Not enough resources to process request.',
    ]) {
      assert.ok(mapMssqlError(login(message)) instanceof TransientDatabaseError, message);
    }
    assert.ok(mapMssqlError(login('Login failed.', { isTransient: true })) instanceof TransientDatabaseError, 'tedious marked it transient');
    const wrongPassword = login("Login failed for user 'app'.");
    assert.equal(mapMssqlError(wrongPassword), wrongPassword);
  });

  it('Azure failover numbers on a request are transient', () => {
    for (const number of [40613, 40197, 40501, 49918, 49919, 49920, 10928, 10929]) {
      assert.ok(mapMssqlError({ number, message: 'x' }) instanceof TransientDatabaseError, String(number));
    }
  });

  it('a claim refused inside an open transaction is a QueueBoxError, not something to retry', () => {
    const mapped = mapMssqlError({ number: CLAIM_IN_OPEN_TRANSACTION, message: 'queuebox: a claim must not run inside an open transaction' });
    assert.ok(mapped instanceof QueueBoxError && !(mapped instanceof TransientDatabaseError));
  });
});

describe('SQL Server start-up checks and pool', () => {
  it('refuses a compatibility level below 130 and names the statement to run', () => {
    assert.throws(() => assertCompatibilityLevel(120), (e: unknown) => e instanceof QueueBoxError && e.message.includes('ALTER DATABASE CURRENT SET COMPATIBILITY_LEVEL = 130'));
    assertCompatibilityLevel(130);
    assertCompatibilityLevel(160);
    assert.match(COMPATIBILITY_LEVEL_SQL, /compatibility_level .* FROM sys\.databases WHERE database_id = DB_ID\(\)/);
  });

  it('start-up (schemaVerify) reads the compatibility level in the same round trip and refuses 120', async () => {
    const config = parseConfig({ database: { type: 'sqlserver', url: 'mssql://x@h/db' } });
    const present = mssqlExpectedColumns(names).flatMap((t) => t.columns.map((c) => ({ table_name: t.table, column_name: c.name })));
    const low = standInPool([{ recordsets: [present, [{ level: 120 }]] }]);
    const driver = new SqlServerDriver({ config, url: 'mssql://x@h/db', pool: low.pool });
    await assert.rejects(driver.schemaVerify(), (e: unknown) => e instanceof QueueBoxError && /compatibility level 120/.test(e.message));
    assert.equal(low.texts.length, 1);
    assert.ok(low.texts[0]!.includes(COMPATIBILITY_LEVEL_SQL));
    const ok = standInPool([{ recordsets: [present, [{ level: 150 }]] }]);
    await new SqlServerDriver({ config, url: 'mssql://x@h/db', pool: ok.pool }).schemaVerify();
  });

  it('checks a pooled connection by its socket, not with a SELECT 1 round trip before every statement', () => {
    const database = parseConfig({ database: { type: 'sqlserver', url: 'mssql://x@h/db' } }).database;
    assert.equal(mssqlPoolConfig(database, 'mssql://u:p@h/db').validateConnection, 'socket');
  });
});

describe('SQL Server migration 5', () => {
  const migration = mssqlMigrations.find((m) => m.version === 5)!;
  const statements = migration.statements(names);
  const earlier = mssqlMigrations.filter((m) => m.version < 5).flatMap((m) => m.statements(names));
  const columns = ['key', 'source', 'idempotency_key', 'aggregate_id'];

  it('re-collates keys, sources, idempotency keys and aggregate ids binary, after dropping every index and constraint on them', () => {
    const alterAt = (column: string) => statements.findIndex((t) => t.includes(`ALTER COLUMN [${column}] NVARCHAR(255) COLLATE ${KEY_COLLATION}`));
    for (const column of columns) assert.ok(alterAt(column) > 0, column);
    const firstAlter = Math.min(...columns.map(alterAt));
    const onColumns = earlier
      .map((t) => /CREATE (?:UNIQUE )?INDEX \[(\w+)\] ON [^(]+\(([^)]*)\)/.exec(t))
      .filter((m): m is RegExpExecArray => m !== null && !/CLUSTERED/.test(m[0]) && columns.some((c) => m[2]!.includes(c === 'key' ? '[key]' : c)))
      .map((m) => m[1]!);
    assert.ok(onColumns.length >= 8, onColumns.join());
    for (const index of onColumns) {
      const dropAt = statements.findIndex((t) => t.includes(`DROP INDEX [${index}]`));
      const createAt = statements.findIndex((t) => t.includes(`CREATE `) && t.includes(`[${index}]`) && !t.includes('DROP'));
      assert.ok(dropAt >= 0 && dropAt < firstAlter && createAt > firstAlter, `${index}: dropped before the ALTER, rebuilt after`);
    }
    const constraintAt = statements.findIndex((t) => t.includes('DROP CONSTRAINT [inbox_source_idempotency_key]'));
    assert.ok(constraintAt >= 0 && constraintAt < firstAlter);
  });

  it('deduplicates on the exact (source, idempotency_key): a unique index with their byte lengths', () => {
    assert.ok(statements.some((t) => t.includes('ADD [source_bytes] AS CAST(DATALENGTH([source]) AS INT) PERSISTED')));
    assert.ok(statements.some((t) => t.includes('ADD [idempotency_key_bytes] AS CAST(DATALENGTH([idempotency_key]) AS INT) PERSISTED')));
    assert.ok(statements.some((t) => t.includes('CREATE UNIQUE INDEX [inbox_source_idempotency_key] ON [dbo].[inbox] (source, idempotency_key, source_bytes, idempotency_key_bytes)')));
  });

  it('scopes relay aggregates per source and indexes rows without key or aggregate', () => {
    const all = statements.join('\n');
    assert.ok(all.includes('[inbox_aggregate_head_idx] ON [dbo].[inbox] (source, aggregate_id, [sequence])'));
    assert.ok(all.includes("[outbox_keyless_pending_idx] ON [dbo].[outbox] (scheduled_at, [sequence]) WHERE state = N''pending'' AND [key] IS NULL"));
    assert.ok(all.includes('[inbox_push_free_idx]'));
  });

  it('gives outbox rows with an empty key their own filtered index, matching the predicate of their claim branch', () => {
    const all = statements.join('\n');
    assert.ok(all.includes("[outbox_empty_key_pending_idx] ON [dbo].[outbox] (scheduled_at, [sequence]) WHERE state = N''pending'' AND [key] = N''''"));
    const claim = buildOutboxClaim(names, { limit: 1, leaseMs: 1000 }).text;
    assert.match(claim, /WHERE c\.state = N'pending' AND c\.attempt = 0 AND c\.scheduled_at <= SYSUTCDATETIME\(\) AND c\.\[key\] = N''/, 'the branch implies the index filter');
  });

  it('sets QUOTED_IDENTIFIER and the ANSI options in every batch that indexes a computed column', () => {
    const onComputed = [...earlier, ...statements].filter((t) => /CREATE (UNIQUE )?INDEX [^;]*\([^)]*_bytes/.test(t));
    assert.ok(onComputed.length >= 1);
    for (const text of onComputed) assert.ok(text.startsWith(FILTERED_INDEX_SET_OPTIONS), text);
  });

  it('builds every secondary index ONLINE where the edition allows and plainly elsewhere', () => {
    const indexes = [...earlier, ...statements].filter((t) => /CREATE (UNIQUE )?INDEX/.test(t) && !/CLUSTERED/.test(t));
    assert.ok(indexes.length > 15);
    for (const text of indexes) {
      assert.ok(text.includes(`IF CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (${ONLINE_INDEX_EDITIONS})`), text);
      assert.match(text, /WITH \(ONLINE = ON\)'\);\s+ELSE\s+EXEC\(N'CREATE [^']*(''[^']*)*'\);/, text);
    }
  });
});
