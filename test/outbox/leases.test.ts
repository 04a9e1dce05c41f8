import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { OutboxPassDriver } from '../../lib/outbox/pass-context.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { delay, waitUntil } from '../helpers/wait.ts';

describe('outbox pass: leases, renewal and reclaim', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], claimTimeoutMs: 1500, pollIntervalMs: 10 },
    });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
  });

  it('keeps the claim of a publish that outlasts the lease by renewing it every third', async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders.paid', payload: {} }]);
    const destination = new RecordingDestination({ delayMs: 3000 });
    const pass = runOutboxPass(passFixture(db, { destinations: [destination] }));
    await delay(2000); // past the first 1500 ms lease
    const forced = await db.driver.outboxReclaimExpired({});
    assert.equal(forced.reclaimed, 0, 'a renewed lease is not reclaimable');
    const [during] = await inspectRows(db, [id!]);
    assert.equal(during!.state, 'processing');
    const summary = await pass;
    assert.deepEqual([summary.sent, summary.claimsLost], [1, 0]);
    assert.equal(destination.deliveries.length, 1);
    assert.equal((await inspectRows(db, [id!]))[0]!.state, 'sent');
  });

  it('aborts a publish whose renewal finds the row taken by another owner, and leaves the row to that owner', async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders.paid', payload: {} }]);
    const destination = new RecordingDestination({ delayMs: 10_000 });
    const fixture = passFixture(db, { destinations: [destination] });
    const pass = runOutboxPass(fixture);
    await waitUntil('the publish starts', () => destination.calls === 1);
    const [thief] = await db.query<{ claim_token: string }>(`UPDATE "${db.schema}".outbox SET claim_token = gen_random_uuid() WHERE id = $1 RETURNING claim_token`, [id]);
    const summary = await pass;
    assert.equal(destination.abortedCalls, 1, 'the publish was aborted');
    assert.equal(destination.deliveries.length, 0);
    assert.equal(summary.claimsLost, 1);
    assert.equal(summary.sent + summary.retried + summary.dead, 0, 'nothing settled for a lost row');
    assert.match(fixture.logger.at('warn')[0]!.message, /lost at renewal/);
    const [row] = await inspectRows(db, [id!]);
    assert.deepEqual([row!.state, row!.claim_token, row!.attempt], ['processing', thief!.claim_token, 0]);
  });

  it("never leases past the invocation's end, so a poller killed mid-batch has its rows reclaimed and delivered again", async () => {
    const ids = await insertOutboxRows(db, Array.from({ length: 5 }, (_, i) => ({ topic: 'orders.paid', payload: { i } })));
    const context = createInvocationContext({ timeoutMs: 2500 });
    // Killed after publishing: settles never return, renewals never reach the database.
    const killed: OutboxPassDriver = {
      ...db.driver,
      outboxRenewMany: () => new Promise<string[]>(() => {}),
      outboxMarkSentMany: () => new Promise<string[]>(() => {}),
    };
    const first = new RecordingDestination();
    const dying = runOutboxPass(passFixture(db, { destinations: [first], driver: killed, context, marginMs: 500, outbox: { claimTimeoutMs: 300_000 } }));
    await waitUntil('the batch is published', () => first.deliveries.length === 5);
    const [lease] = await db.query<{ ahead_ms: number }>(
      `SELECT max(EXTRACT(EPOCH FROM lease_expires_at - clock_timestamp()) * 1000)::float8 AS ahead_ms FROM "${db.schema}".outbox WHERE state = 'processing'`,
    );
    // Tolerance: the lease is sized when the claim is sent and applied when it runs (one round trip).
    assert.ok(lease!.ahead_ms <= context.getRemainingTimeInMillis() + 250, `lease ends ${lease!.ahead_ms} ms ahead, invocation ends in ${context.getRemainingTimeInMillis()} ms`);
    const dead = await dying;
    assert.equal(dead.abandoned, 5, 'the pass returned at its deadline with the batch in flight');
    assert.deepEqual((await inspectRows(db, ids)).map((r) => r.state), Array(5).fill('processing'));

    await waitUntil('the invocation has ended', () => context.getRemainingTimeInMillis() === 0);
    await delay(50);
    const second = new RecordingDestination();
    const recovery = await runOutboxPass(passFixture(db, { destinations: [second] }));
    assert.equal(recovery.reclaimed, 5);
    assert.equal(recovery.sent, 5);
    assert.deepEqual((await inspectRows(db, ids)).map((r) => r.state), Array(5).fill('sent'));
    const duplicates = [...second.deliveries].filter((d) => first.deliveries.some((f) => f.id === d.id));
    assert.equal(duplicates.length, 5, 'each row reached the destination twice: the duplicate an idempotent receiver absorbs');
  });

  it("renews in the invocation's last second too: a 1 s lease lasts while its publish is open, up to the invocation's end", async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders.paid', payload: {} }]);
    // claimTimeoutMs 1000: renewals every 333 ms, each granting min(1000, time left). The last
    // renewal granted a full second from 1284 ms before the invocation's end: without renewals
    // once less than a second was left, the lease ended about 280 ms before the invocation, while
    // the publish (1.8 s) was still open until its pass's deadline (50 ms before the end).
    const context = createInvocationContext({ timeoutMs: 2000 });
    const destination = new RecordingDestination({ delayMs: 1800 });
    const pass = runOutboxPass(passFixture(db, { destinations: [destination], context, marginMs: 50, outbox: { claimTimeoutMs: 1000 } }));
    await waitUntil('the publish starts', () => destination.calls === 1);
    await waitUntil('less than 250 ms of the invocation is left', () => context.getRemainingTimeInMillis() <= 250);
    const [during] = await db.query<{ state: string; ahead_ms: number }>(
      `SELECT state, EXTRACT(EPOCH FROM lease_expires_at - clock_timestamp())::float8 * 1000 AS ahead_ms FROM "${db.schema}".outbox WHERE id = $1`,
      [id],
    );
    assert.equal(during!.state, 'processing');
    assert.ok(during!.ahead_ms > 0, `the lease ended ${-during!.ahead_ms} ms ago with the publish still open`);
    const forced = await db.driver.outboxReclaimExpired({});
    assert.equal(forced.reclaimed, 0, 'no other invocation can reclaim the row while its publish is open');
    const summary = await pass;
    assert.deepEqual([summary.sent, summary.claimsLost], [1, 0]);
    assert.deepEqual((await inspectRows(db, [id!])).map((r) => [r.state, r.attempt]), [['sent', 0]]);
  });

  it('runs the reclaim step once for two passes at once (the throttle lives in the database)', async () => {
    const ids = await insertOutboxRows(db, Array.from({ length: 6 }, (_, i) => ({ topic: 'orders.paid', payload: { i } })));
    await db.query(
      `UPDATE "${db.schema}".outbox SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = clock_timestamp() - interval '1 minute',
              lease_expires_at = clock_timestamp() - interval '1 second'`,
    );
    const destination = new RecordingDestination();
    const outbox = { claimTimeoutMs: 10_000 }; // reclaim at most every 2 s
    const passes = await Promise.all([1, 2].map(() => runOutboxPass(passFixture(db, { destinations: [destination], driver: db.newDriver(), outbox }))));
    assert.deepEqual(passes.map((p) => p.reclaimRan).sort(), [false, true]);
    assert.equal(passes[0]!.reclaimed + passes[1]!.reclaimed, 6);
    const third = await runOutboxPass(passFixture(db, { destinations: [destination], outbox }));
    assert.equal(third.reclaimRan, false, 'within claimTimeoutMs / 5 of the last run');
    await db.query(`UPDATE "${db.schema}".queuebox_maintenance SET last_run_at = last_run_at - interval '2 seconds'`);
    const fourth = await runOutboxPass(passFixture(db, { destinations: [destination], outbox }));
    assert.equal(fourth.reclaimRan, true);
    assert.deepEqual((await inspectRows(db, ids)).map((r) => [r.state, r.attempt]), Array(6).fill(['sent', 1]), 'reclaim counts each lost lease as an attempt, once');
  });
});
