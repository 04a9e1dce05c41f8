/**
 * The SQL Server console reads' shapes, checked without a server: parameters bound and used,
 * values never in the text, the database UTC clock, the bounds (`TOP`) on every read, and the
 * key-head check; and the trace context a row page shows, read as the column's JSON text.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { traceView } from '../../lib/console/trace-view.ts';
import { buildBlockedHeads, buildClaimsInFlight, buildDeadGroups, buildDeadSearch, buildRowGet, buildStatsByState, inboxRowGet, outboxRowGet } from '../../lib/db/sqlserver/console-queries.ts';
import type { MssqlRunner, MssqlStatement } from '../../lib/db/sqlserver/mssql-pool.ts';
import { names, SENTINELS } from './statement-shapes.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';
import { PULL_AGE_SOURCE_LIMIT } from '../../lib/db/driver.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

const blocked = { limit: 50, scanLimit: 500, poisonAttempts: 3, waitingCap: 1000 };

function statements(): Record<string, MssqlStatement> {
  const dead = { label: SENTINELS.topic, from: new Date(0), to: new Date(), limit: 25, scanLimit: 10_000 };
  return {
    'outbox stats by state': buildStatsByState(names, 'outbox', 100_000),
    'inbox stats by state': buildStatsByState(names, 'inbox', 100_000),
    'outbox claims in flight': buildClaimsInFlight(names, 'outbox', 20),
    'inbox claims in flight': buildClaimsInFlight(names, 'inbox', 20),
    'outbox blocked keys': buildBlockedHeads(names, 'outbox', blocked),
    'inbox blocked aggregates': buildBlockedHeads(names, 'inbox', blocked),
    'outbox dead search': buildDeadSearch(names, 'outbox', dead),
    'inbox dead search': buildDeadSearch(names, 'inbox', { ...dead, label: SENTINELS.source }),
    'outbox dead search after a cursor': buildDeadSearch(names, 'outbox', { ...dead, before: { at: '2026-11-30T10:00:00.1234567Z', id: SENTINELS.id } }),
    'outbox dead groups': buildDeadGroups(names, 'outbox', { scanLimit: 10_000, limit: 50, errorChars: 120 }),
    'inbox dead groups': buildDeadGroups(names, 'inbox', { scanLimit: 10_000, limit: 50, errorChars: 120 }),
    'outbox row get': buildRowGet(names, 'outbox', SENTINELS.id),
    'inbox row get': buildRowGet(names, 'inbox', SENTINELS.id),
  };
}

describe('SQL Server console read shapes', () => {
  it('pages dead rows by keyset and reads full rows (payloads) only for the rows shown', () => {
    const text = statements()['outbox dead search after a cursor']!.text;
    assert.match(text, /AND \(@v_before IS NULL OR updated_at < @v_before OR updated_at = @v_before AND id < @p_before_id\)/);
    assert.match(text, /SELECT TOP \(@p_scan\) id, topic AS label, updated_at AS t FROM/, 'the scan reads no payload');
    assert.match(text, /WHERE r\.id IN \(SELECT TOP \(@p_limit\) id FROM hit ORDER BY t DESC, id DESC\)\) p/, 'full rows of the shown page only');
    assert.equal(text.match(/r\.payload/g)?.length, 1);
  });

  it('binds only @p_ parameters, each used, declares only @v_ variables, and puts no value in the text', () => {
    for (const [name, statement] of Object.entries(statements())) {
      const declared = new Set([...statement.text.matchAll(/DECLARE\s+(@\w+)/g)].map((m) => m[1]!));
      const bound = new Set(statement.params.map((p) => `@${p.name}`));
      for (const p of bound) assert.ok(statement.text.includes(p), `${name}: ${p} bound but unused`);
      for (const [used] of statement.text.matchAll(/(?<!@)@\w+/g)) assert.ok(declared.has(used) || bound.has(used), `${name}: ${used} is neither declared nor bound`);
      for (const value of Object.values(SENTINELS).map(String)) assert.ok(!statement.text.includes(value), `${name} contains ${value}`);
    }
  });

  it('reads the database UTC clock and bounds every row source with TOP', () => {
    for (const [name, statement] of Object.entries(statements())) {
      assert.doesNotMatch(statement.text, /\b(GETDATE|GETUTCDATE|SYSDATETIME|CURRENT_TIMESTAMP)\b/i, name);
      if (!name.includes('row get')) assert.match(statement.text, /TOP \(@p_/, name);
    }
    const stats = statements()['outbox stats by state']!.text;
    assert.equal(stats.match(/SELECT TOP \(@p_cap\)/g)?.length, 8, 'four states and four windows, each counted up to the cap');
    assert.match(stats, /SYSUTCDATETIME\(\)/);
  });

  it('ages the inbox by the earlier of its push rows and its pull rows, the pull rows source by source through their open index', () => {
    const text = statements()['inbox stats by state']!.text;
    assert.match(text, /DECLARE @v_oldest DATETIME2\(7\) = \(SELECT MIN\(scheduled_at\) FROM \[dbo\]\.\[inbox\] WHERE state = N'pending' AND consumption = N'push' AND scheduled_at <= @v_now\);/);
    assert.match(text, new RegExp(`WHILE @v_pull_source IS NOT NULL AND @v_pull_sources < ${PULL_AGE_SOURCE_LIMIT}\\b`), 'at most the first sources, by name');
    assert.match(text, /SET @v_pull_sources = @v_pull_sources \+ 1;/);
    assert.match(text, /SET @v_pull_due = \(SELECT MIN\(scheduled_at\) FROM \[dbo\]\.\[inbox\] WHERE source = @v_pull_source AND state IN \(N'pending', N'processing'\) AND consumption = N'pull' AND state = N'pending' AND scheduled_at <= @v_now\);/, 'one source, through the open pull index');
    assert.match(text, /SET @v_pull_source = \(SELECT MIN\(source\) FROM \[dbo\]\.\[inbox\] WHERE state IN \(N'pending', N'processing'\) AND consumption = N'pull' AND source > @v_pull_source\);/, 'then the next source');
    assert.match(text, /IF @v_pull_oldest < @v_oldest OR @v_oldest IS NULL SET @v_oldest = @v_pull_oldest;/);
    assert.match(text, /DATEDIFF_BIG\(millisecond, @v_oldest, @v_now\) AS oldest_ms/);
    assert.doesNotMatch(statements()['outbox stats by state']!.text, /pull/, 'the outbox has no pull rows');
  });

  it('checks that a blocked row is the head of its key, and counts the rows behind it up to the cap', () => {
    const text = statements()['outbox blocked keys']!.text;
    assert.match(text, /NOT EXISTS \(SELECT 1 FROM \[dbo\]\.\[outbox\] e WHERE e\.\[key\] = r\.\[key\] AND e\.state IN \(N'pending', N'processing'\)\s+AND e\.\[sequence\] < r\.\[sequence\]\)/);
    assert.match(text, /SELECT TOP \(@p_waiting\) 1 AS x FROM \[dbo\]\.\[outbox\] b WHERE b\.\[key\] = r\.\[key\]/);
    const inbox = statements()['inbox blocked aggregates']!.text;
    assert.match(inbox, /NOT EXISTS \(SELECT 1 FROM \[dbo\]\.\[inbox\] e WHERE e\.source = r\.source AND e\.aggregate_id = r\.aggregate_id/, 'the head of its source and aggregate');
    assert.match(inbox, /FROM \[dbo\]\.\[inbox\] b WHERE b\.source = r\.source AND b\.aggregate_id = r\.aggregate_id/, 'rows behind it of the same source');
    assert.match(inbox, /WHERE r\.aggregate_id <> N''/, 'an empty aggregate id is keyless');
  });

  it('dead groups read the newest dead rows through the finished-rows index, group a fixed-length error start and bound both reads', () => {
    const text = statements()['inbox dead groups']!.text;
    assert.match(text, /SELECT TOP \(@p_scan\) source COLLATE Latin1_General_100_BIN2 AS label, DATALENGTH\(source\) AS label_bytes,\s+consumption AS consumption,\s+CAST\(LEFT\(last_error, 120\) AS NVARCHAR\(120\)\) COLLATE Latin1_General_100_BIN2 AS error, created_at AS t\s+FROM \[dbo\]\.\[inbox\] WHERE state = N'dead' ORDER BY created_at DESC/);
    assert.match(text, /SELECT TOP \(@p_limit\) label, consumption, error, COUNT\(\*\) AS n/);
    assert.match(statements()['outbox dead groups']!.text, /topic COLLATE Latin1_General_100_BIN2 AS label, DATALENGTH\(topic\) AS label_bytes,\s+CAST\(NULL AS NVARCHAR\(10\)\) AS consumption,[^]+updated_at AS t/);
    assert.throws(() => buildDeadGroups(names, 'outbox', { scanLimit: 10, limit: 5, errorChars: 1001 }), /errorChars must be at most 1000/);
  });

  it('a row read for its page carries its stored trace_context (NVARCHAR JSON text) for the page to validate', async () => {
    for (const name of ['outbox row get', 'inbox row get']) assert.match(statements()[name]!.text, /, r\.trace_context FROM \[dbo\]\.\[(outbox|inbox)\] r WHERE r\.id = @p_id;$/, name);
    const stored = JSON.stringify({ traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' });
    const dbRow = (trace: string | null) => ({
      id: SENTINELS.id.toUpperCase(), label: 't', key: null, state: 'dead', attempt: 5, max_attempts: 5, payload: '{}', headers: '{}', sequence: '7',
      scheduled_at: new Date(), created_at: new Date(), updated_at: new Date(), claimed_at: null, lease_expires_at: null, last_error: null, replay_count: 0, trace_context: trace,
    });
    const answering = (row: object) => ({ request: () => ({ input: () => undefined, query: async () => ({ recordset: [row] }) }) }) as unknown as MssqlRunner;
    const outbox = await outboxRowGet(answering(dbRow(stored)), names, { id: SENTINELS.id });
    assert.equal(outbox!.traceContext, stored);
    const view = traceView(outbox!.traceContext);
    assert.ok(view.kind === 'valid');
    assert.deepEqual([view.traceId, view.xrayTraceId, view.parentSpanId, view.sampled], ['4bf92f3577b34da6a3ce929d0e0e4736', '1-4bf92f35-77b34da6a3ce929d0e0e4736', '00f067aa0ba902b7', true]);
    assert.equal((await inboxRowGet(answering({ ...dbRow(null), consumption: 'push' }), names, { id: SENTINELS.id }))!.traceContext, null);
    assert.equal(traceView((await outboxRowGet(answering(dbRow('{"traceparent":"<b>')), names, { id: SENTINELS.id }))!.traceContext).kind, 'invalid');
    // JSON text `null` is no trace context, as PostgreSQL's jsonb null (read as null) is.
    assert.equal(traceView((await outboxRowGet(answering(dbRow('null')), names, { id: SENTINELS.id }))!.traceContext).kind, 'none');
  });
});
