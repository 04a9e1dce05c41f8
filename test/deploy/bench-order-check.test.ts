/**
 * The bench's per-key order check: what it counts as a violation decides which peer settings may
 * win a keyed sweep, so it is tested on its own.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { OrderCheck, orderKept } from '../../bench/order-check.ts';

describe('bench order check', () => {
  it('counts nothing for messages of a key one after another, in order, and ignores keyless ones', () => {
    const check = new OrderCheck();
    for (const i of [1, 2, 3]) {
      check.start('k', i);
      check.start(null, 100 - i);
      check.finish('k');
    }
    assert.deepEqual(check.notes(), { orderViolations: 0, overlaps: 0, outOfOrder: 0 });
  });

  it('counts a message that starts while another of its key runs, and one that starts after a later one', () => {
    const check = new OrderCheck();
    check.start('k', 1);
    check.start('k', 2); // overlaps 1
    check.finish('k');
    check.finish('k');
    check.start('j', 5);
    check.finish('j');
    check.start('j', 4); // after 5: out of order
    check.finish('j');
    assert.deepEqual(check.notes(), { orderViolations: 2, overlaps: 1, outOfOrder: 1 });
  });

  it('does not count a message started again (at-least-once) as out of order', () => {
    const check = new OrderCheck();
    check.start(7, 3);
    check.finish(7);
    check.start(7, 3);
    check.finish(7);
    assert.equal(check.violations, 0);
  });

  it('a run with violations is not kept; one without, or with no check, is', () => {
    assert.equal(orderKept({ orderViolations: 3 }), false);
    assert.equal(orderKept({ orderViolations: 0 }), true);
    assert.equal(orderKept({ passes: 2 }), true);
    assert.equal(orderKept(undefined), true);
  });
});
