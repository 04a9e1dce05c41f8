/**
 * The closing window of a pass (`closingBudgetMs`): its backlog read, heartbeat stamp and
 * scale-out release share one window, fixed when the first of them asks. The release of a slot
 * whose scale-out invoke failed may come early in a pass; it takes a window of its own, so a pass
 * that then runs to its deadline still gets its slice past it for its own closing steps.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CLOSING_SLICE_MS, closingBudgetMs, createDeadline } from '../../lib/runtime/deadline.ts';

/** A context whose clock the test moves. */
function clock(timeoutMs: number) {
  let now = 0;
  return { context: { getRemainingTimeInMillis: () => timeoutMs - now }, advance: (ms: number) => void (now += ms) };
}

describe('closing window', () => {
  it('an early release of a failed invoke leaves the pass its slice past the deadline', () => {
    const { context, advance } = clock(10_000);
    const deadline = createDeadline(context, 3000);
    // Early in the pass: the failed invoke's slot is released within a window of its own.
    assert.equal(closingBudgetMs(deadline, { shared: false })(), 7000, 'early: up to the deadline');
    advance(7000); // the pass ran to its deadline
    assert.equal(closingBudgetMs(deadline)(), CLOSING_SLICE_MS, 'the pass\'s closing steps still get their slice');
  });

  it('the shared window is fixed by its first ask', () => {
    const { context, advance } = clock(10_000);
    const deadline = createDeadline(context, 3000);
    assert.equal(closingBudgetMs(deadline)(), 7000);
    advance(7000);
    assert.equal(closingBudgetMs(deadline)(), 0, 'asked early, the shared window ends at the deadline');
  });
});
