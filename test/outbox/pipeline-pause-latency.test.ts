/**
 * The pause of pipelining (`afterClaim`, `mayPipeline`) must not hold up rows of other keys behind
 * one slow batch: a pass in `deadline` mode claims a row committed while it waits within about
 * `maxPollIntervalMs` (docs/performance.md, idle cost), and a paused pass whose batch publishes
 * slowly still claims the due rows of other keys about once per `maxPollIntervalMs`. Before the
 * fix, a pipelined claim that found nothing (or a pause left by the driver's previous invocation)
 * stopped all claiming until the slow batch finished — with a call that hangs, for the rest of the
 * invocation.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { claimMemoryOf } from '../../lib/outbox/claim-size.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { delegatingPassDriver, insertOutboxRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { delay, waitUntil } from '../helpers/wait.ts';

/** How long the call carrying a row of topic `slow` takes (ms). */
const SLOW_CALL_MS = 4000;
const MAX_POLL_MS = 500;

describe('outbox pass: the pipelining pause and a slow batch', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 50, maxPollIntervalMs: MAX_POLL_MS },
    });
  });
  after(async () => db?.drop());
  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
  });

  const slowDestination = () =>
    new RecordingDestination({ name: 'main', answer: () => 'sent', delayMs: (messages) => (messages.some((m) => m.topic === 'slow') ? SLOW_CALL_MS : 0) });

  it('a row committed while a pipelined claim found nothing is claimed within about maxPollIntervalMs, not after the slow batch', async () => {
    await insertOutboxRows(db, [{ topic: 'slow', key: 'slow-key', payload: { n: 0 } }]);
    const destination = slowDestination();
    const pass = runOutboxPass(passFixture(db, { destinations: [destination], driver: delegatingPassDriver(db.driver), mode: 'deadline', timeoutMs: SLOW_CALL_MS + 2500 }));
    // The slow batch is publishing and the pass has polled (pipelined) and found nothing.
    await delay(300);
    const committed = Date.now();
    await insertOutboxRows(db, [{ topic: 'fast', key: 'fast-key', payload: { n: 1 } }]);
    await waitUntil('the fast row is sent', () => destination.deliveries.some((d) => d.topic === 'fast'), SLOW_CALL_MS + 2500);
    const latencyMs = Date.now() - committed;
    const summary = await pass;
    assert.equal(summary.sent, 2);
    assert.ok(latencyMs < MAX_POLL_MS * 3, `the fast row waited ${latencyMs} ms (slow call ${SLOW_CALL_MS} ms, maxPollIntervalMs ${MAX_POLL_MS})`);
  });

  it('a pause left by the previous invocation does not stop the pass claiming other keys while its batch publishes slowly', async () => {
    const driver = delegatingPassDriver(db.driver);
    // The container's last invocation ended after pipelined claims found nothing.
    const memory = claimMemoryOf(driver, db.config.outbox.batchSize, db.config.outbox.maxBatchSize ?? db.config.outbox.batchSize);
    memory.pipelinePause = 16;
    memory.pipelineBackoff = 16;
    await insertOutboxRows(db, [{ topic: 'slow', key: 'slow-key', payload: { n: 0 } }]);
    const destination = slowDestination();
    const started = Date.now();
    const pass = runOutboxPass(passFixture(db, { destinations: [destination], driver, mode: 'deadline', timeoutMs: SLOW_CALL_MS + 2500 }));
    await delay(200);
    await insertOutboxRows(db, [{ topic: 'fast', key: 'fast-key', payload: { n: 1 } }]);
    await waitUntil('the fast row is sent', () => destination.deliveries.some((d) => d.topic === 'fast'), SLOW_CALL_MS + 2500);
    const latencyMs = Date.now() - started;
    const summary = await pass;
    assert.equal(summary.sent, 2);
    assert.ok(latencyMs < 200 + MAX_POLL_MS * 3, `the fast row was sent ${latencyMs} ms into the pass (slow call ${SLOW_CALL_MS} ms)`);
  });
});
