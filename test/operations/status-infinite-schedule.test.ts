/**
 * `queuebox status` with rows at `scheduled_at = '-infinity'` or `'infinity'` (PostgreSQL's
 * timestamptz takes both; plain SQL can write them). A row at `infinity` is never due: it is
 * counted, not aged. A row at `-infinity` is due since forever: it is aged from when it was
 * written (`created_at`), and an older finite row still wins. The backlog reads of the passes
 * (`pendingOnly`) age the same rows alike.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runCli } from '../../bin/cli-program.ts';
import { collectStatus, formatStatus } from '../../lib/operations/status.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('status with rows scheduled at -infinity and infinity (PostgreSQL)', () => {
  let db: TestDatabase;
  let outbox: string;
  let inbox: string;
  before(async () => {
    db = await createTestDatabase({ inbox: { sources: { hooks: { type: 'sqs', consumption: 'push' }, orders: { type: 'sqs', consumption: 'pull' } } } });
    outbox = `"${db.schema}".outbox`;
    inbox = `"${db.schema}".inbox`;
  });
  after(async () => db?.drop());

  /** `queuebox status` itself: exit code and output. */
  async function cli(...args: string[]) {
    let stdout = '';
    let stderr = '';
    const code = await runCli(['status', ...args], {
      stdout: (t) => (stdout += t),
      stderr: (t) => (stderr += t),
      env: { QUEUEBOX_DATABASE_URL: db.url, QUEUEBOX_DATABASE__SCHEMA: db.schema },
    });
    return { code, stdout, stderr };
  }

  const within = (value: number, low: number, high: number, what: string) => assert.ok(value >= low && value < high, `${what}: expected ${low}..${high}, got ${value}`);

  it('rows at infinity only: counted as pending, oldest due age 0, in status and in the backlog reads', async () => {
    await db.query(`INSERT INTO ${outbox} (topic, key, payload, scheduled_at) VALUES ('order.hold', 'k-park', '{"n":1}', 'infinity')`);
    await db.query(`INSERT INTO ${inbox} (source, idempotency_key, payload, consumption, scheduled_at) VALUES ('hooks', 'h-park', '{}', 'push', 'infinity'), ('orders', 'o-park', '{}', 'pull', 'infinity')`);

    const report = await collectStatus(db.driver, db.config);
    assert.deepEqual([report.outbox.counts.pending, report.outbox.oldestPendingAgeSeconds], [1, 0]);
    assert.deepEqual([report.inbox.counts.pending, report.inbox.oldestPendingAgeSeconds], [2, 0]);
    assert.deepEqual(await db.driver.outboxStats({ pendingOnly: true }), { counts: { pending: 1 }, oldestPendingAgeSeconds: 0 });
    assert.deepEqual(await db.driver.inboxStats({ pendingOnly: true }), { counts: { pending: 1 }, oldestPendingAgeSeconds: 0 });
    const { code, stdout, stderr } = await cli();
    assert.equal(code, 0, stderr);
    assert.match(stdout, /^oldest pending: outbox 0s, inbox 0s$/m);
  });

  it('a row at -infinity waiting behind its key head is aged from its created_at (10 minutes), in status (text and --json) and in the backlog read', async () => {
    // The key's head is in flight under a live lease; the row at -infinity waits behind it.
    await db.query(`INSERT INTO ${outbox} (topic, key, payload, state, claim_token, lease_expires_at, claimed_at)
      VALUES ('order.x', 'k-neg', '{"n":0}', 'processing', gen_random_uuid(), clock_timestamp() + interval '10 minutes', clock_timestamp())`);
    await db.query(`INSERT INTO ${outbox} (topic, key, payload, scheduled_at, created_at) VALUES ('order.x', 'k-neg', '{"n":1}', '-infinity', clock_timestamp() - interval '10 minutes')`);
    // Inbox: a push row at -infinity received 5 minutes ago, a pull row at -infinity received 20 minutes ago.
    await db.query(`INSERT INTO ${inbox} (source, idempotency_key, payload, consumption, scheduled_at, created_at)
      VALUES ('hooks', 'h-neg', '{}', 'push', '-infinity', clock_timestamp() - interval '5 minutes'), ('orders', 'o-neg', '{}', 'pull', '-infinity', clock_timestamp() - interval '20 minutes')`);

    const report = await collectStatus(db.driver, db.config);
    assert.deepEqual([report.outbox.counts.pending, report.outbox.counts.processing], [2, 1]);
    within(report.outbox.oldestPendingAgeSeconds, 595, 700, 'outbox status age');
    within(report.inbox.oldestPendingAgeSeconds, 1195, 1300, 'inbox status age: the pull row');
    assert.match(formatStatus(report), /^oldest pending: outbox 10m \d+s, inbox 20m \d+s$/m);

    const outboxBacklog = await db.driver.outboxStats({ pendingOnly: true });
    assert.equal(outboxBacklog.counts.pending, 2);
    within(outboxBacklog.oldestPendingAgeSeconds, 595, 700, 'outbox backlog age');
    const inboxBacklog = await db.driver.inboxStats({ pendingOnly: true });
    assert.equal(inboxBacklog.counts.pending, 2, 'the push rows');
    within(inboxBacklog.oldestPendingAgeSeconds, 295, 400, 'inbox backlog age: the push row');

    const { code, stdout, stderr } = await cli('--json');
    assert.equal(code, 0, stderr);
    const json = JSON.parse(stdout) as { outbox: { oldestPendingAgeSeconds: number }; inbox: { oldestPendingAgeSeconds: number } };
    within(json.outbox.oldestPendingAgeSeconds, 595, 700, '--json outbox age');
  });

  it('a finite row due longer ago than a row at -infinity was written is the oldest', async () => {
    await db.query(`INSERT INTO ${outbox} (topic, payload, scheduled_at) VALUES ('order.y', '{}', clock_timestamp() - interval '1 hour')`);
    const report = await collectStatus(db.driver, db.config);
    within(report.outbox.oldestPendingAgeSeconds, 3595, 3700, 'status age');
    within((await db.driver.outboxStats({ pendingOnly: true })).oldestPendingAgeSeconds, 3595, 3700, 'backlog age');
  });

  it('a row at -infinity whose created_at is not finite either gets a finite age above a century; a dead row last updated at infinity is listed', async () => {
    await db.query(`UPDATE ${outbox} SET created_at = '-infinity' WHERE scheduled_at = '-infinity'`);
    await db.query(`INSERT INTO ${outbox} (topic, payload, state, attempt, last_error, updated_at) VALUES ('order.dead', '{}', 'dead', 5, 'boom', 'infinity')`);
    const century = 100 * 365 * 86_400;
    const report = await collectStatus(db.driver, db.config);
    assert.ok(Number.isFinite(report.outbox.oldestPendingAgeSeconds) && report.outbox.oldestPendingAgeSeconds > century, `status: ${report.outbox.oldestPendingAgeSeconds}`);
    const backlog = (await db.driver.outboxStats({ pendingOnly: true })).oldestPendingAgeSeconds;
    assert.ok(Number.isFinite(backlog) && backlog > century, `backlog: ${backlog}`);
    assert.equal(report.outbox.dead[0]?.topicOrSource, 'order.dead');
    const { code, stdout, stderr } = await cli();
    assert.equal(code, 0, stderr);
    assert.match(stdout, /order\.dead\s+\+275760-09-13T00:00:00\.000Z\s+boom/, 'infinity shown as the latest time a Date holds');
  });
});
