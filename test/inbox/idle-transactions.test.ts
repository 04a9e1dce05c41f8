import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { handler } from '../../functions/inbox-relay.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { createCountedDatabase, type CountedDatabase } from '../helpers/transaction-count.ts';

/** The most transactions an idle 10 s invocation may send (about one a second, and its first steps). */
const IDLE_10S_BUDGET = 20;

describe('an idle inbox relay invocation', () => {
  let db: CountedDatabase;
  before(async () => {
    // The default configuration (poll interval, deadline margin), as deployed.
    db = await createCountedDatabase({ inbox: { sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } } } });
  });
  after(async () => {
    setContainer(undefined);
    await db?.drop();
  });

  it(`polls an empty inbox until its deadline with at most ${IDLE_10S_BUDGET} transactions in a 10 s invocation`, { timeout: 60_000 }, async (t) => {
    // An invocation of its own for each run (`transactionsWithin` may run it again).
    let context = createInvocationContext({ timeoutMs: 10_000 });
    const { result: summary, transactions, counts } = await db.transactionsWithin(IDLE_10S_BUDGET, async (driver) => {
      context = createInvocationContext({ timeoutMs: 10_000 });
      setContainer({ config: db.config, driver, logger: createLogger({ serviceName: 'queuebox', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
      return handler({}, context);
    });
    assert.equal(summary.claimed, 0);
    // It kept polling while a lease still fitted before its deadline (margin 5 s, least lease 1 s) ...
    const left = context.getRemainingTimeInMillis();
    assert.ok(left > 0 && left <= db.config.lambda.deadlineMarginMs + 1000 + 500, `returned with ${left} ms of the invocation left`);
    // ... and did so cheaply. At least the reclaim, a claim and the backlog gauge read were counted.
    t.diagnostic(`${counts.join(', ')} transactions`);
    assert.ok(transactions >= 3, `counted ${transactions} transactions: the count misses the pass's own`);
    assert.ok(transactions <= IDLE_10S_BUDGET, `an idle 10 s invocation sent ${transactions} transactions`);
  });
});
