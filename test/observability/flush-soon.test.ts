/**
 * A flush whose sink throws part-way writes no line twice: the next flush writes what was not
 * written, so CloudWatch's sums and `value()` stay the counts recorded.
 *
 * `flushSoonOf`: the flush the outbox and relay passes queue right after a step that counted (a
 * lost claim, a dead row), so that an invocation killed later keeps the counts. A burst of counts
 * is written once, after the burst; a sink that throws reaches the caller's `onError`, never the
 * microtask queue (an exception there would end the process).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { flushSoonOf, QueueBoxMetrics } from '../../lib/observability/metrics.ts';

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('flushSoonOf', () => {
  it('writes a burst of counts once, after the burst, and again after the next burst', async () => {
    let flushes = 0;
    const flushSoon = flushSoonOf({ flush: () => void flushes++ }, (error) => assert.fail(String(error)));
    flushSoon();
    flushSoon();
    flushSoon();
    assert.equal(flushes, 0, 'not during the step that counted');
    await nextTurn();
    assert.equal(flushes, 1);
    flushSoon();
    await nextTurn();
    assert.equal(flushes, 2);
  });

  it("hands a sink's error to onError, and queues again after it", async () => {
    const errors: unknown[] = [];
    let calls = 0;
    const flushSoon = flushSoonOf(
      {
        flush: () => {
          calls++;
          throw new Error(`sink down ${calls}`);
        },
      },
      (error) => errors.push(error),
    );
    flushSoon();
    flushSoon();
    await nextTurn();
    flushSoon();
    await nextTurn();
    assert.deepEqual(
      errors.map((e) => (e as Error).message),
      ['sink down 1', 'sink down 2'],
    );
  });
});

describe('QueueBoxMetrics.flush with a sink that throws part-way', () => {
  it('writes each line once: the next flush writes only the lines the failed one did not', () => {
    const written: string[] = [];
    let refuse = 1;
    const metrics = new QueueBoxMetrics({
      namespace: 'NS',
      serviceName: 'svc',
      write: (line) => {
        // The second line of the first flush is refused; every other line is taken.
        if (written.length === 1 && refuse-- > 0) throw new Error('EAGAIN: sink busy');
        written.push(line);
      },
    });
    metrics.count('outboxMessages', 5, { status: 'sent' });
    metrics.count('claimsLost', 1, { component: 'outbox' });
    assert.throws(() => metrics.flush(), /EAGAIN/);
    assert.equal(written.length, 1);
    metrics.count('claimsLost', 2, { component: 'outbox' });
    metrics.flush();
    metrics.flush();
    const sum = (name: string) => written.map((l) => JSON.parse(l) as Record<string, unknown>).reduce((n, line) => n + (typeof line[name] === 'number' ? (line[name] as number) : 0), 0);
    assert.equal(written.length, 2, 'one line per dimension set, none written twice');
    assert.equal(sum('queuebox_outbox_messages_total'), 5);
    assert.equal(sum('queuebox_claims_lost_total'), 3);
    assert.equal(metrics.value('outboxMessages', { status: 'sent' }), 5);
    assert.equal(metrics.value('claimsLost', { component: 'outbox' }), 3);
  });
});
