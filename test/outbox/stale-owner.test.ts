import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { ClaimRef } from '../../lib/db/driver.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValues, insertOutboxRows, inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { createGate, delay, waitUntil } from '../helpers/wait.ts';

describe('outbox pass: a stale owner', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], claimTimeoutMs: 1000, pollIntervalMs: 10 },
    });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
  });

  it('that was frozen past its lease cannot mark sent, retry or dead: zero rows, counted, logged, and the new owner keeps the rows', async () => {
    const thaw = createGate();
    const ids = await insertOutboxRows(db, ['sent', 'retry', 'dead'].map((answer) => ({ topic: 'orders.paid', payload: { answer } })));
    const staleClaims: ClaimRef[] = [];
    const stale = db.newDriver();
    // A frozen container: its publish resumes when thawed, and its renewal reaches the database
    // only after the thaw (and changes no row: the rows are the new owner's by then). It answers
    // after the batch has left the lease keeper, so the settle reports the lost claims.
    const frozenDriver = {
      ...stale,
      outboxClaimMany: async (p: { limit: number; leaseMs: number }) => {
        const rows = await stale.outboxClaimMany(p);
        staleClaims.push(...rows.map((r) => ({ id: r.id, token: r.claimToken })));
        return rows;
      },
      outboxRenewMany: () => thaw.wait().then(() => delay(50)).then((): string[] => []),
    };
    const answers = (m: { payload: Record<string, unknown> }) =>
      m.payload.answer === 'sent' ? ('sent' as const) : m.payload.answer === 'retry' ? { status: 'retryable' as const, error: 'InternalError' } : { status: 'permanent' as const, error: 'too large', deadNow: true };
    const staleDestination = new RecordingDestination({ waitFor: thaw.wait, answer: answers });
    const staleFixture = passFixture(db, { destinations: [staleDestination], driver: frozenDriver });
    const stalePass = runOutboxPass(staleFixture);

    await waitUntil('the stale pass holds all three rows', () => staleDestination.offered.length === 3);
    await delay(1100); // its 1000 ms lease expires; nothing renews it
    const release = createGate();
    const ownerDestination = new RecordingDestination({ waitFor: release.wait });
    // The new owner leases for long, so its claim cannot lapse however slow the test machine is;
    // clearing the reclaim gate lets its pass reclaim at once despite the longer throttle.
    await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
    const ownerPass = runOutboxPass(passFixture(db, { destinations: [ownerDestination], driver: db.newDriver(), outbox: { claimTimeoutMs: 30_000 } }));
    await waitUntil('the new owner publishes', () => ownerDestination.offered.length === 3);
    // The owner's renewals move the lease; everything else must stay as the owner left it.
    const ownerView = async () => (await inspectRows(db, ids)).map(({ dueInMs: _due, retryDelayMs: _delay, ...row }) => row);
    const ownerState = await ownerView();
    assert.ok(ownerState.every((r) => r.state === 'processing' && !staleClaims.some((c) => c.token === r.claim_token)), 'reclaimed and claimed again with new tokens');

    thaw.open();
    const staleSummary = await stalePass;
    assert.equal(staleSummary.claimsLost, 3);
    assert.deepEqual([staleSummary.sent, staleSummary.retried, staleSummary.dead], [0, 0, 0]);
    assert.equal(staleFixture.logger.at('error').length, 1, 'a lost sent is an error');
    assert.match(staleFixture.logger.at('error')[0]!.message, /lost before marking sent/);
    assert.equal(staleFixture.logger.at('warn').length, 2, 'a lost retry and a lost dead are warnings');
    staleFixture.metrics.flush();
    assert.equal(emfValues(staleFixture.lines).get('queuebox_claims_lost_total{component=outbox}'), 3);

    for (const write of [
      db.driver.outboxMarkSentMany({ claims: staleClaims }),
      db.driver.outboxRetryMany({ items: staleClaims.map((c) => ({ ...c, delayMs: 0, error: 'stale' })) }),
      db.driver.outboxMarkDeadMany({ items: staleClaims.map((c) => ({ ...c, error: 'stale' })) }),
      db.driver.outboxRenewMany({ claims: staleClaims, leaseMs: 60_000 }),
    ]) {
      assert.deepEqual(await write, [], 'a stale token changes no row');
    }
    assert.deepEqual(await ownerView(), ownerState, "the new owner's rows are untouched");

    release.open();
    const ownerSummary = await ownerPass;
    assert.equal(ownerSummary.reclaimed, 3);
    assert.equal(ownerSummary.sent, 3);
    assert.deepEqual((await inspectRows(db, ids)).map((r) => r.state), ['sent', 'sent', 'sent']);
    assert.equal(staleDestination.deliveries.length + ownerDestination.deliveries.length, 4, 'the stale sent was a duplicate delivery');
  });
});
