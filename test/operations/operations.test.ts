import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import { handler as reclaimHandler } from '../../functions/reclaim.ts';
import { handler as replayHandler } from '../../functions/replay.ts';
import { handler as retentionHandler } from '../../functions/retention.ts';
import { UsageError } from '../../lib/errors.ts';
import { parseReplayRequest, runReplayCommand } from '../../lib/operations/replay.ts';
import { retentionProgress } from '../../lib/operations/retention-progress.ts';
import { collectStatus, formatStatus } from '../../lib/operations/status.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';

describe('operations: reclaim, replay, retention, status', () => {
  let db: TestDatabase;
  let emf: string[];
  const outbox = () => `"${db.schema}".outbox`;
  const inbox = () => `"${db.schema}".inbox`;

  before(async () => {
    db = await createTestDatabase({
      destinations: { orders: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/1/orders' }, bus: { type: 'eventbridge', eventBusName: 'b', source: 's' } },
      outbox: { routes: [{ topicPattern: 'order.*', destination: 'orders' }, { topicPattern: '**', destination: 'bus' }] },
      retention: { enabled: true, batchSize: 2 },
    });
  });
  beforeEach(async () => {
    emf = [];
    setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env: {}, writeMetrics: (l) => emf.push(l) });
    await db.query(`DELETE FROM ${outbox()}`);
    await db.query(`DELETE FROM ${inbox()}`);
    await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`).catch(() => {});
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  /** Inserts an outbox row in `state`, `ageHours` old (created and updated). */
  async function outboxRow(state: string, topic = 'order.paid', ageHours = 0, extra = ''): Promise<string> {
    const id = randomUUID();
    await db.query(
      `INSERT INTO ${outbox()} (id, topic, payload, state, created_at, updated_at, scheduled_at, last_error${extra ? ', claim_token, lease_expires_at, claimed_at' : ''})
       VALUES ($1, $2, '{}', $3, now() - make_interval(hours => $4), now() - make_interval(hours => $4), now() - make_interval(hours => $4), $5${extra ? `, gen_random_uuid(), ${extra}, now()` : ''})`,
      [id, topic, state, ageHours, state === 'dead' ? 'boom: 500' : null],
    );
    return id;
  }
  async function inboxRow(state: string, ageHours = 0, lease = ''): Promise<string> {
    const id = randomUUID();
    await db.query(
      `INSERT INTO ${inbox()} (id, source, idempotency_key, payload, state, created_at${lease ? ', claim_token, lease_expires_at, claimed_at' : ''})
       VALUES ($1, 'src', $2, '{}', $3, now() - make_interval(hours => $4)${lease ? `, gen_random_uuid(), ${lease}, now()` : ''})`,
      [id, randomUUID(), state, ageHours],
    );
    return id;
  }
  const states = async (table: string) =>
    Object.fromEntries((await db.query<{ state: string; n: string }>(`SELECT state, count(*) AS n FROM ${table} GROUP BY state`)).map((r) => [r.state, Number(r.n)]));

  it('reclaim invoked by hand returns expired outbox and inbox rows to pending at once, ignoring the throttle', async () => {
    await outboxRow('processing', 't', 0, `now() - interval '1 second'`);
    await outboxRow('processing', 't', 0, `now() + interval '5 minutes'`);
    await inboxRow('processing', 0, `now() - interval '1 second'`);
    // A worker reclaimed a moment ago: the throttle gate is closed for claimTimeoutMs / 5.
    await db.driver.outboxReclaimExpired({ throttleMs: 60_000 });
    await db.driver.inboxReclaimExpired({ throttleMs: 60_000, maxAttempts: 5 });
    await outboxRow('processing', 't', 0, `now() - interval '1 second'`);
    const scheduled = await reclaimHandler({ source: 'aws.events', 'detail-type': 'Scheduled Event' }, fakeLambdaContext({ timeoutMs: 30_000 }));
    assert.deepEqual(scheduled, { outbox: 0, inbox: 0, outboxDead: 0, inboxDead: 0, throttled: true }, 'a scheduled run respects the gate');
    const manual = await reclaimHandler({}, fakeLambdaContext({ timeoutMs: 30_000 }));
    assert.deepEqual(manual, { outbox: 1, inbox: 0, outboxDead: 0, inboxDead: 0, throttled: false });
    await inboxRow('processing', 0, `now() - interval '1 second'`);
    assert.deepEqual(await reclaimHandler({ source: 'aws.events', force: true }, fakeLambdaContext({ timeoutMs: 30_000 })), { outbox: 0, inbox: 1, outboxDead: 0, inboxDead: 0, throttled: false });
    assert.deepEqual(await states(outbox()), { pending: 2, processing: 1 }, 'the live lease is untouched');
    assert.ok(emf.some((l) => JSON.parse(l).queuebox_outbox_messages_reclaimed_total === 1), 'reclaimed rows are counted');
  });

  it('replay refuses a request without any filter and a request for another state, moving nothing', async () => {
    await outboxRow('dead');
    await assert.rejects(replayHandler({}, fakeLambdaContext({ timeoutMs: 30_000 })), (e: unknown) => e instanceof UsageError && /at least one filter/.test(e.message));
    await assert.rejects(replayHandler({ topics: ['order.paid'], states: ['pending'] }, fakeLambdaContext({ timeoutMs: 30_000 })), (e: unknown) => e instanceof UsageError && /only sent or dead/.test(e.message));
    await assert.rejects(replayHandler({ destination: 'nowhere' }, fakeLambdaContext({ timeoutMs: 30_000 })), (e: unknown) => e instanceof UsageError && /not configured/.test(e.message));
    assert.deepEqual(await states(outbox()), { dead: 1 });
  });

  it('replay moves only dead rows by default, sent ones when asked, resetting them and counting the replay', async () => {
    const dead = await outboxRow('dead', 'order.paid');
    const sent = await outboxRow('sent', 'order.shipped');
    await outboxRow('pending', 'order.paid');
    await outboxRow('processing', 'order.paid', 0, `now() + interval '5 minutes'`);
    await outboxRow('dead', 'user.created');
    assert.deepEqual(await replayHandler({ destination: 'orders' }, fakeLambdaContext({ timeoutMs: 30_000 })), { moved: 1 });
    assert.deepEqual(await replayHandler({ destination: 'orders', states: ['sent'] }, fakeLambdaContext({ timeoutMs: 30_000 })), { moved: 1 });
    const rows = await db.query<{ id: string; state: string; attempt: number; last_error: string | null; replay_count: number }>(
      `SELECT id, state, attempt, last_error, replay_count FROM ${outbox()} WHERE id = ANY($1::uuid[]) ORDER BY topic`,
      [[dead, sent]],
    );
    assert.deepEqual(rows.map((r) => [r.state, r.attempt, r.last_error, r.replay_count]), [['pending', 0, null, 1], ['pending', 0, null, 1]]);
    assert.deepEqual(await replayHandler({ ids: [dead], states: ['dead'] }, fakeLambdaContext({ timeoutMs: 30_000 })), { moved: 0 }, 'a pending row is not moved again');
    assert.deepEqual(await states(outbox()), { pending: 3, processing: 1, dead: 1 });
  });

  it('the replay function requeues dead inbox rows with "table": "inbox", previews them, and refuses outbox filters there', async () => {
    const dead = await inboxRow('dead');
    await inboxRow('processed');
    await inboxRow('pending');
    const ctx = fakeLambdaContext({ timeoutMs: 30_000 });
    const preview = await replayHandler({ table: 'inbox', sources: ['src'], dryRun: true }, ctx);
    assert.ok('dryRun' in preview);
    assert.deepEqual([preview.count, preview.sample.map((r) => r.id)], [1, [dead]]);
    await assert.rejects(replayHandler({ table: 'inbox', destination: 'orders' }, ctx), (e: unknown) => e instanceof UsageError && /destination filters outbox rows/.test(e.message));
    await assert.rejects(replayHandler({ table: 'inbox', sources: ['src'], consumption: 'relay' }, ctx), (e: unknown) => e instanceof UsageError && /consumption must be push \(the relay\) or pull/.test(e.message));
    assert.deepEqual(await replayHandler({ table: 'inbox', sources: ['src'], consumption: 'push' }, ctx), { moved: 1 });
    assert.deepEqual(await states(inbox()), { pending: 2, processed: 1 });
  });

  it('replay refuses null, booleans, lists and misspelled keys as filters, naming the key, and moves nothing', async () => {
    for (let i = 0; i < 3; i++) await outboxRow('dead', 'order.paid');
    for (let i = 0; i < 3; i++) await outboxRow('sent', 'order.paid');
    const refusals: Array<[unknown, RegExp]> = [
      [{ createdFrom: null }, /createdFrom/],
      [{ createdFrom: false }, /createdFrom/],
      [{ createdFrom: true }, /createdFrom/],
      [{ createdFrom: ['2025'] }, /createdFrom/],
      [{ createdTo: 'yesterday' }, /createdTo/],
      [{ topic: 'order.paid' }, /unknown key "topic"/],
      [{ state: 'dead' }, /unknown key "state"/],
      [{ topics: 'order.paid' }, /topics/],
      [{ topics: [] }, /topics must list at least one topic/],
      [{ ids: ['not-a-uuid'] }, /ids\.0 must be a row id/],
      [{ destination: '' }, /destination must not be empty/],
      [{ destination: 'constructor' }, /not configured/],
      [{ topics: ['order.paid'], states: 'dead' }, /states/],
      [{ topics: ['order.paid'], dryRun: 'yes' }, /dryRun/],
      [null, /must be an object/],
      [[{ topics: ['order.paid'] }], /must be an object/],
    ];
    for (const [event, reason] of refusals) {
      await assert.rejects(replayHandler(event, fakeLambdaContext({ timeoutMs: 30_000 })), (e: unknown) => e instanceof UsageError && reason.test(e.message), JSON.stringify(event));
    }
    assert.deepEqual(await states(outbox()), { dead: 3, sent: 3 }, 'no refused request moved a row');
  });

  it('replay previews with dryRun and refuses more than 100 rows unless the event says yes', async () => {
    await db.query(
      `INSERT INTO ${outbox()} (topic, payload, state, last_error) SELECT 'order.paid', '{}', 'dead', 'boom ' || g FROM generate_series(1, 101) g`,
    );
    await outboxRow('sent', 'order.paid');
    const preview = (await replayHandler({ topics: ['order.paid'], dryRun: true }, fakeLambdaContext({ timeoutMs: 30_000 }))) as { dryRun: true; count: number; sample: Array<{ state: string; lastError: string }> };
    assert.equal(preview.count, 101);
    assert.equal(preview.sample.length, 10);
    assert.ok(preview.sample.every((r) => r.state === 'dead' && r.lastError.startsWith('boom')));
    await assert.rejects(replayHandler({ topics: ['order.paid'] }, fakeLambdaContext({ timeoutMs: 30_000 })), (e: unknown) => e instanceof UsageError && /would move 101 rows/.test(e.message));
    assert.deepEqual(await states(outbox()), { dead: 101, sent: 1 });
    assert.deepEqual(await replayHandler({ topics: ['order.paid'], yes: true }, fakeLambdaContext({ timeoutMs: 30_000 })), { moved: 101 });
    assert.deepEqual(await states(outbox()), { pending: 101, sent: 1 });
  });

  it('replay times name their zone: a date-time without one is refused naming the key, a date alone is 00:00 UTC, an offset is applied', () => {
    assert.throws(() => parseReplayRequest({ createdFrom: '2026-11-30T12:00:00' }), (e: unknown) => e instanceof UsageError && /createdFrom has no time zone/.test(e.message));
    assert.throws(() => parseReplayRequest({ createdTo: '2026-11-30 12:00' }), (e: unknown) => e instanceof UsageError && /createdTo has no time zone/.test(e.message));
    assert.equal((parseReplayRequest({ createdFrom: '2026-11-30' }).createdFrom as Date).toISOString(), '2026-11-30T00:00:00.000Z');
    // JavaScript would roll these over into March: the range would silently be wider than typed.
    assert.throws(() => parseReplayRequest({ createdTo: '2026-02-29' }), (e: unknown) => e instanceof UsageError && /createdTo is not a valid time \(2026-02 has no day 29\)/.test(e.message));
    assert.throws(() => parseReplayRequest({ createdTo: '2026-02-30T00:00:00Z' }), (e: unknown) => e instanceof UsageError && /createdTo is not a valid time/.test(e.message));
    assert.equal((parseReplayRequest({ createdFrom: '2028-02-29' }).createdFrom as Date).toISOString(), '2028-02-29T00:00:00.000Z');
    assert.equal((parseReplayRequest({ createdFrom: '2026-11-30T12:00:00+02:00' }).createdFrom as Date).toISOString(), '2026-11-30T10:00:00.000Z');
  });

  it('replay without yes is bounded at the move: 900 rows dying between the count and the move make it move nothing', async () => {
    await db.query(`INSERT INTO ${outbox()} (topic, payload, state, last_error) SELECT 'order.paid', '{}', 'dead', 'boom' FROM generate_series(1, 100)`);
    await db.query(`INSERT INTO ${outbox()} (topic, payload, state) SELECT 'order.paid', '{}', 'pending' FROM generate_series(1, 900)`);
    // The count sees 100 rows; then 900 more die before the move runs.
    const racing = new Proxy(db.driver, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target) as unknown;
        if (prop !== 'outboxReplayPreview') return typeof value === 'function' ? value.bind(target) : value;
        return async (p: Parameters<typeof target.outboxReplayPreview>[0]) => {
          const counted = await target.outboxReplayPreview(p);
          await db.query(`UPDATE ${outbox()} SET state = 'dead', last_error = 'died meanwhile' WHERE state = 'pending'`);
          return counted;
        };
      },
    });
    const command = { request: { topics: ['order.paid'], states: ['dead' as const] }, dryRun: false, yes: false };
    await assert.rejects(runReplayCommand(racing, db.config, command), (e: unknown) => e instanceof UsageError && /100 rows matched when counted, but more than 100 match now.*nothing moved/.test(e.message));
    assert.deepEqual(await states(outbox()), { dead: 1000 });
  });

  it('retention deletes old finished rows in bounded batches and never touches pending or processing rows', async () => {
    for (let i = 0; i < 5; i++) await outboxRow('sent', 't', 200);
    await outboxRow('sent', 't', 1);
    await outboxRow('dead', 't', 800);
    await outboxRow('pending', 't', 2000);
    await outboxRow('processing', 't', 2000, `now() + interval '5 minutes'`);
    for (let i = 0; i < 3; i++) await inboxRow('processed', 200);
    await inboxRow('dead', 800);
    await inboxRow('pending', 2000);
    await inboxRow('processing', 2000, `now() + interval '5 minutes'`);
    const result = await retentionHandler({ source: 'aws.events' }, fakeLambdaContext({ timeoutMs: 60_000 }));
    assert.deepEqual(result, { enabled: true, deleted: { outbox: 6, inbox: 4 }, complete: true });
    assert.deepEqual(await states(outbox()), { sent: 1, pending: 1, processing: 1 });
    assert.deepEqual(await states(inbox()), { pending: 1, processing: 1 });
    const deleted = emf.map((l) => JSON.parse(l)).filter((m) => 'queuebox_cleanup_messages_deleted_total' in m);
    assert.deepEqual(deleted.map((m) => [m.table, m.queuebox_cleanup_messages_deleted_total]).sort(), [['inbox', 4], ['outbox', 6]]);
  });

  it('retention stops at the invocation deadline and reports that it is not complete', async () => {
    for (let i = 0; i < 4; i++) await outboxRow('sent', 't', 200);
    const result = await retentionHandler({}, fakeLambdaContext({ timeoutMs: 1_000 }));
    assert.equal(result.complete, false);
    assert.deepEqual(await states(outbox()), { sent: 4 }, 'a deadline already inside the margin deletes nothing');
  });

  it('retention progress in a log prints at most one line per interval while a policy runs, and one when it ends', () => {
    const lines: string[] = [];
    let clock = 0;
    const progress = retentionProgress((t) => lines.push(t), { updating: false, intervalMs: 10_000, batchSize: 100, now: () => clock });
    const policy = { table: 'outbox' as const, state: 'sent' as const, olderThanHours: 168 };
    for (let batch = 1; batch <= 3000; batch++) {
      clock += 100;
      progress.onBatch(policy, 100, batch * 100);
    }
    progress.onBatch(policy, 7, 300_007);
    progress.finish();
    assert.equal(lines.length, 31, '300 s of batches: 30 interim lines and the final one');
    assert.equal(lines.at(-1), 'outbox sent older than 168 h: 300007 deleted\n');
  });

  it('status counts rows per state, reports the oldest due pending age and lists dead rows with their errors', async () => {
    await outboxRow('pending', 'a', 1);
    await outboxRow('dead', 'order.paid');
    await inboxRow('processed');
    const report = await collectStatus(db.driver, db.config);
    assert.equal(report.outbox.counts.pending, 1);
    assert.equal(report.outbox.counts.dead, 1);
    assert.equal(report.inbox.counts.processed, 1);
    assert.ok(report.outbox.oldestPendingAgeSeconds >= 3500, `~1 h, got ${report.outbox.oldestPendingAgeSeconds}`);
    assert.equal(report.outbox.dead[0]!.lastError, 'boom: 500');
    const text = formatStatus(report);
    assert.match(text, /outbox\s+dead\s+1/);
    assert.match(text, /order\.paid\s+\S+\s+boom: 500/);
  });
});
