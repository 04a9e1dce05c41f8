/**
 * `flushSoonOf`: the flush the outbox and relay passes queue right after a step that counted (a
 * lost claim, a dead row), so that an invocation killed later keeps the counts. A burst of counts
 * is written once, after the burst; a sink that throws reaches the caller's `onError`, never the
 * microtask queue (an exception there would end the process).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { flushSoonOf } from '../../lib/observability/metrics.ts';

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
