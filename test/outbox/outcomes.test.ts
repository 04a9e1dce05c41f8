import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValues, insertOutboxRows, inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

describe('outbox pass: per-entry outcomes', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: 'orders.**', destination: 'main' }], retryBaseDelayMs: 1000, pollIntervalMs: 10 },
    });
  });
  after(async () => db.drop());
  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
  });

  it('lands each entry of a partly failed batch in its own state: sent, retry with backoff, dead at once', async () => {
    const ids = await insertOutboxRows(db, ['ok-1', 'internal', 'too-big', 'invalid', 'throttled', 'ok-2'].map((name) => ({ topic: 'orders.created', payload: { name } })));
    const destination = new RecordingDestination({
      answer: (m) => {
        switch (m.payload.name) {
          case 'internal':
            return { status: 'retryable', error: 'InternalError: We encountered an internal error' };
          case 'too-big':
            return { status: 'permanent', error: 'message of 2000000 bytes exceeds the 1 MiB limit', deadNow: true };
          case 'invalid':
            return { status: 'permanent', error: 'InvalidParameterValue: bad attribute' };
          case 'throttled':
            return { status: 'retryable', error: 'ThrottlingException: Rate exceeded' };
          default:
            return 'sent';
        }
      },
    });
    const fixture = passFixture(db, { destinations: [destination] });
    const summary = await runOutboxPass(fixture);

    const rows = await inspectRows(db, ids);
    const byName = (i: number) => rows.find((r) => r.id === ids[i])!;
    assert.equal(byName(0).state, 'sent');
    assert.equal(byName(5).state, 'sent');
    for (const [i, text] of [[1, 'InternalError'], [3, 'InvalidParameterValue'], [4, 'ThrottlingException']] as const) {
      const row = byName(i);
      assert.equal(row.state, 'pending', `row ${i} waits for a retry`);
      assert.equal(row.attempt, 1);
      assert.notEqual(row.claim_token, null, 'the retry keeps its token on the pending row: sent again after a lost answer, it recognises the row');
      assert.ok(row.last_error?.includes(text), `last_error names the failure: ${row.last_error}`);
      assert.ok(row.retryDelayMs >= 999 && row.retryDelayMs <= 1251, `due after 1000 ms + up to 25 % jitter, got ${row.retryDelayMs}`);
    }
    assert.equal(byName(2).state, 'dead');
    assert.equal(byName(2).attempt, 0);
    assert.match(byName(2).last_error!, /permanent failure, not retried: .*exceeds the 1 MiB limit/);
    assert.deepEqual({ claimed: summary.claimed, sent: summary.sent, retried: summary.retried, dead: summary.dead, claimsLost: summary.claimsLost }, { claimed: 6, sent: 2, retried: 3, dead: 1, claimsLost: 0 });

    fixture.metrics.flush();
    const emf = emfValues(fixture.lines);
    assert.equal(emf.get('queuebox_outbox_messages_total{status=sent}'), 2);
    assert.equal(emf.get('queuebox_outbox_messages_total{status=retried}'), 3);
    assert.equal(emf.get('queuebox_outbox_messages_total{status=dead}'), 1);
    assert.equal(emf.get('queuebox_outbox_destination_messages_total{destination=main,outcome=sent}'), 2);
    assert.equal(emf.get('queuebox_outbox_destination_messages_total{destination=main,outcome=retryable}'), 2);
    assert.equal(emf.get('queuebox_outbox_destination_messages_total{destination=main,outcome=permanent}'), 2);
  });

  it('delivers a row with max_attempts 3 exactly three times (the first delivery and two retries), then marks it dead naming them', async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders.paid', payload: {}, maxAttempts: 3 }]);
    const destination = new RecordingDestination({ answer: () => ({ status: 'retryable', error: 'ServiceUnavailable' }) });
    for (let pass = 0; pass < 5; pass++) {
      await runOutboxPass(passFixture(db, { destinations: [destination] }));
      await db.query(`UPDATE "${db.schema}".outbox SET scheduled_at = clock_timestamp() WHERE state = 'pending'`);
    }
    assert.deepEqual(destination.offered.map((m) => m.attempt), [0, 1, 2], 'three deliveries, X-Attempt 0-based');
    const [row] = await inspectRows(db, [id!]);
    assert.equal(row!.state, 'dead');
    assert.equal(row!.attempt, 2, 'the 0-based number of its last delivery');
    assert.match(row!.last_error!, /^gave up after 3 of 3 attempts: destination main: ServiceUnavailable/);
  });

  it('gives a row enqueued with the default max_attempts five deliveries', async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders.paid', payload: {} }]);
    const destination = new RecordingDestination({ answer: () => ({ status: 'retryable', error: 'ServiceUnavailable' }) });
    for (let pass = 0; pass < 7; pass++) {
      await runOutboxPass(passFixture(db, { destinations: [destination] }));
      await db.query(`UPDATE "${db.schema}".outbox SET scheduled_at = clock_timestamp() WHERE state = 'pending'`);
    }
    assert.deepEqual(destination.offered.map((m) => m.attempt), [0, 1, 2, 3, 4]);
    const [row] = await inspectRows(db, [id!]);
    assert.deepEqual([row!.state, row!.max_attempts], ['dead', 5]);
  });

  it('delivers a row with max_attempts 1 once: a failed first delivery is its last', async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders.paid', payload: {}, maxAttempts: 1 }]);
    const destination = new RecordingDestination({ answer: () => ({ status: 'retryable', error: 'ServiceUnavailable' }) });
    for (let pass = 0; pass < 3; pass++) {
      await runOutboxPass(passFixture(db, { destinations: [destination] }));
      await db.query(`UPDATE "${db.schema}".outbox SET scheduled_at = clock_timestamp() WHERE state = 'pending'`);
    }
    assert.deepEqual(destination.offered.map((m) => m.attempt), [0]);
    const [row] = await inspectRows(db, [id!]);
    assert.deepEqual([row!.state, row!.attempt, row!.last_error], ['dead', 0, 'gave up after 1 of 1 attempts: destination main: ServiceUnavailable']);
  });

  it('doubles the retry delay per attempt', async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders.paid', payload: {} }]);
    await db.query(`UPDATE "${db.schema}".outbox SET attempt = 3 WHERE id = $1`, [id]);
    const destination = new RecordingDestination({ answer: () => ({ status: 'retryable', error: 'InternalError' }) });
    await runOutboxPass(passFixture(db, { destinations: [destination] }));
    const [row] = await inspectRows(db, [id!]);
    assert.equal(row!.attempt, 4);
    assert.ok(row!.retryDelayMs >= 7999 && row!.retryDelayMs <= 10_001, `1000 × 2^3 + up to 25 %, got ${row!.retryDelayMs}`);
  });

  it('redacts secrets from last_error and keeps it within 2000 characters', async () => {
    const [id] = await insertOutboxRows(db, [{ topic: 'orders.paid', payload: {} }]);
    const error = `connect failed for https://admin:hunter2@db.internal password=s3cr3t Authorization: Bearer abcdefghijkl ${'x'.repeat(5000)}`;
    const destination = new RecordingDestination({ answer: () => ({ status: 'retryable', error }) });
    await runOutboxPass(passFixture(db, { destinations: [destination] }));
    const [row] = await inspectRows(db, [id!]);
    assert.ok(row!.last_error!.length <= 2000, `length ${row!.last_error!.length}`);
    for (const secret of ['hunter2', 's3cr3t', 'abcdefghijkl']) assert.ok(!row!.last_error!.includes(secret), `${secret} is redacted`);
    assert.ok(row!.last_error!.startsWith('destination main: connect failed for https://***@db.internal'), row!.last_error!);
  });

  it('retries every entry of a call that fails as a whole', async () => {
    const ids = await insertOutboxRows(db, Array.from({ length: 12 }, (_, i) => ({ topic: 'orders.created', payload: { i } })));
    const destination = new RecordingDestination({ failCall: () => new Error('socket hang up') });
    const summary = await runOutboxPass(passFixture(db, { destinations: [destination] }));
    assert.equal(destination.calls, 2, '12 rows in calls of at most 10');
    assert.equal(summary.retried, 12);
    const rows = await inspectRows(db, ids);
    assert.ok(rows.every((r) => r.state === 'pending' && r.attempt === 1 && r.last_error!.includes('socket hang up')));
  });

  it('marks a row whose topic matches no route dead at once with a clear last_error, and delivers the rest', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders.created', payload: {} },
      { topic: 'invoices.created', payload: {} },
      { topic: 'orders.paid', payload: {} },
    ]);
    const destination = new RecordingDestination();
    const summary = await runOutboxPass(passFixture(db, { destinations: [destination] }));
    const rows = await inspectRows(db, ids);
    assert.deepEqual(rows.map((r) => r.state), ['sent', 'dead', 'sent']);
    assert.equal(rows[1]!.last_error, 'no route matches topic "invoices.created" (outbox.routes)');
    assert.equal(rows[1]!.attempt, 0);
    assert.deepEqual(destination.offered.map((m) => m.topic), ['orders.created', 'orders.paid']);
    assert.equal(summary.dead, 1);
  });

  it('keeps destination calls within outbox.concurrency', async () => {
    await insertOutboxRows(db, Array.from({ length: 100 }, (_, i) => ({ topic: 'orders.created', payload: { i } })));
    const destination = new RecordingDestination({ delayMs: 30 });
    const summary = await runOutboxPass(passFixture(db, { destinations: [destination] }));
    assert.equal(summary.sent, 100);
    assert.equal(destination.calls, 10);
    assert.ok(destination.maxConcurrentCalls <= db.config.outbox.concurrency, `at most ${db.config.outbox.concurrency}, saw ${destination.maxConcurrentCalls}`);
    assert.ok(destination.maxConcurrentCalls > 1, 'calls do run in parallel');
  });
});
