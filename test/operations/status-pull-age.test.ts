/**
 * `queuebox status` reports the age of the oldest due pending row of each table: for the inbox,
 * pull rows count as push rows do (its pending count holds both). The relay's backlog gauge
 * (`inboxStats({ pendingOnly: true })`, `queuebox_inbox_oldest_pending_age_seconds` and its alarm)
 * stays the relay's: push rows only — a pull row waits for your workers, not for the relay.
 * PostgreSQL runs for real; the SQL Server twin is checked by the shape of its statements.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runCli } from '../../bin/cli-program.ts';
import { mssqlNames } from '../../lib/db/sqlserver/names.ts';
import { buildStats } from '../../lib/db/sqlserver/table-stats.ts';
import { collectStatus, formatStatus } from '../../lib/operations/status.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('status: the inbox oldest pending age counts pull rows', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ inbox: { sources: { orders: { type: 'sqs', consumption: 'pull' }, hooks: { type: 'sqs', consumption: 'push' } } } });
  });
  after(async () => {
    await db.drop();
  });

  const receive = async (source: string, key: string, consumption: 'push' | 'pull', dueAgoSeconds: number) => {
    const { id } = await db.driver.inboxInsert({ source, idempotencyKey: key, payload: { key }, consumption });
    await db.query(`UPDATE "${db.schema}".inbox SET scheduled_at = clock_timestamp() - make_interval(secs => $2) WHERE id = $1`, [id, dueAgoSeconds]);
    return id;
  };

  it('a pull row pending for 2 minutes is the inbox’s oldest pending row in status (text and --json); the relay gauge does not count it', async () => {
    await receive('orders', 'pull-1', 'pull', 120);
    const report = await collectStatus(db.driver, db.config);
    assert.equal(report.inbox.counts.pending, 1);
    assert.ok(report.inbox.oldestPendingAgeSeconds >= 115 && report.inbox.oldestPendingAgeSeconds < 600, `~120 s, got ${report.inbox.oldestPendingAgeSeconds}`);
    assert.match(formatStatus(report), /^oldest pending: outbox 0s, inbox 2m\b/m);

    // The command itself.
    let stdout = '';
    const code = await runCli(['status', '--json'], { stdout: (t) => (stdout += t), stderr: () => {}, env: { QUEUEBOX_DATABASE_URL: db.url, QUEUEBOX_DATABASE__SCHEMA: db.schema } });
    assert.equal(code, 0, stdout);
    const json = JSON.parse(stdout) as { inbox: { counts: Record<string, number>; oldestPendingAgeSeconds: number } };
    assert.equal(json.inbox.counts.pending, 1);
    assert.ok(json.inbox.oldestPendingAgeSeconds >= 115, `--json: ${json.inbox.oldestPendingAgeSeconds}`);

    // The relay's backlog: push rows only.
    const backlog = await db.driver.inboxStats({ pendingOnly: true });
    assert.deepEqual(backlog, { counts: { pending: 0 }, oldestPendingAgeSeconds: 0 });
  });

  it('with push and pull rows pending, status shows the older of the two; the relay gauge the push row’s', async () => {
    await receive('hooks', 'push-1', 'push', 30);
    const report = await collectStatus(db.driver, db.config);
    assert.equal(report.inbox.counts.pending, 2);
    assert.ok(report.inbox.oldestPendingAgeSeconds >= 115, `the pull row's ~120 s, got ${report.inbox.oldestPendingAgeSeconds}`);
    const backlog = await db.driver.inboxStats({ pendingOnly: true });
    assert.equal(backlog.counts.pending, 1);
    assert.ok(backlog.oldestPendingAgeSeconds >= 25 && backlog.oldestPendingAgeSeconds < 115, `the push row's ~30 s, got ${backlog.oldestPendingAgeSeconds}`);
  });

  it('SQL Server: the status read ages every due pending row; the backlog read only the rows its filter keeps', () => {
    const names = mssqlNames('dbo', { outbox: 'outbox', inbox: 'inbox', maintenance: 'queuebox_maintenance' });
    const push = ` AND consumption = N'push'`;
    const full = buildStats(names.inbox, push).text;
    const oldest = /MIN\((CASE WHEN .*? END)\)/s.exec(full)?.[1];
    assert.ok(oldest !== undefined, full);
    assert.equal(oldest, `CASE WHEN state = N'pending' AND scheduled_at <= SYSUTCDATETIME() THEN scheduled_at END`, 'no consumption filter on the age');
    assert.doesNotMatch(full, /consumption/, 'the status read counts and ages push and pull rows alike');
    const backlog = buildStats(names.inbox, push, { pendingOnly: true }).text;
    assert.match(backlog, /WHERE state = N'pending' AND consumption = N'push';$/, 'the backlog read keeps the push rows');
  });
});
