import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker } from '../../lib/index.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

const EMPTY = { claimed: 0, completed: 0, retried: 0, dead: 0, released: 0, claimsLost: 0, abandoned: 0 };

/**
 * A pull worker in a Lambda whose timeout is no longer than `lambda.deadlineMarginMs` (AWS's
 * default timeout, 3 s, under the default margin, 5 s) has no time to claim in any invocation.
 * `runOnce` then returns its empty summary, as it did, but says why, as the scheduled passes do.
 */
describe('pull runOnce started with no time to claim', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  const worker = (source: string, logger: ReturnType<typeof memoryLogger>) => {
    const handled: string[] = [];
    const w = createPullWorker({ driver: db.driver, config: db.config, source, metrics: false, logger, handler: async (message) => void handled.push(message.id) });
    return { worker: w, handled };
  };

  it('in a 3 s invocation under the 5 s margin: claims nothing, leaves the row pending, and warns naming the time left and the margin', async () => {
    assert.equal(db.config.lambda.deadlineMarginMs, 5000);
    const [id] = await insertPullRows(db, 'short', [{ key: 'e1' }]);
    const logger = memoryLogger();
    const { worker: w, handled } = worker('short', logger);

    const { durationMs: _durationMs, ...summary } = await w.runOnce({ context: fakeLambdaContext({ timeoutMs: 3000 }) });

    assert.deepEqual(summary, EMPTY);
    assert.deepEqual(handled, []);
    const [row] = await readPullRows(db, 'short');
    assert.equal(row?.id, id);
    assert.deepEqual({ state: row?.state, attempt: row?.attempt, claim_token: row?.claim_token }, { state: 'pending', attempt: 0, claim_token: null });
    const warnings = logger.lines.filter((l) => l.level === 'warn');
    assert.equal(warnings.length, 1, JSON.stringify(logger.lines));
    assert.match(warnings[0]!.message, /no time to claim: \d+ ms left at its start, lambda\.deadlineMarginMs 5000; raise the function's timeout .*or lower lambda\.deadlineMarginMs/);
    const leftMs = Number(/(\d+) ms left/.exec(warnings[0]!.message)![1]);
    assert.ok(leftMs > 0 && leftMs <= 3000, `names the time left: ${leftMs} ms`);
    assert.deepEqual(logger.lines.filter((l) => l.level === 'error'), []);
  });

  it('with an explicit deadline already passed: claims nothing and warns too', async () => {
    await insertPullRows(db, 'passed', [{ key: 'e1' }]);
    const logger = memoryLogger();
    const { worker: w, handled } = worker('passed', logger);

    const { durationMs: _durationMs, ...summary } = await w.runOnce({ deadline: createDeadline(fakeLambdaContext({ timeoutMs: 3000 }), 3000) });

    assert.deepEqual(summary, EMPTY);
    assert.deepEqual(handled, []);
    assert.deepEqual((await readPullRows(db, 'passed')).map((r) => r.state), ['pending']);
    const warnings = logger.lines.filter((l) => l.level === 'warn');
    assert.equal(warnings.length, 1, JSON.stringify(logger.lines));
    assert.match(warnings[0]!.message, /no time to claim: \d+ ms left in the invocation at its start, 0 ms of them before the deadline; raise the function's timeout, or give runOnce a later deadline/);
  });

  it('with an explicit deadline ahead but under 1 s left in the invocation (no lease to grant): claims nothing and warns too', async () => {
    await insertPullRows(db, 'no-lease', [{ key: 'e1' }]);
    const logger = memoryLogger();
    const { worker: w, handled } = worker('no-lease', logger);

    const { durationMs: _durationMs, ...summary } = await w.runOnce({ deadline: createDeadline(fakeLambdaContext({ timeoutMs: 800 }), 100) });

    assert.deepEqual(summary, EMPTY);
    assert.deepEqual(handled, []);
    assert.deepEqual((await readPullRows(db, 'no-lease')).map((r) => r.state), ['pending']);
    const warnings = logger.lines.filter((l) => l.level === 'warn');
    assert.equal(warnings.length, 1, JSON.stringify(logger.lines));
    assert.match(warnings[0]!.message, /no time to claim: \d+ ms left in the invocation at its start, \d+ ms of them before the deadline;.* 1000 ms left in the invocation/);
  });

  it('on a worker already running: rejects as before, without the warning', async () => {
    const logger = memoryLogger();
    const { worker: w } = worker('running', logger);
    await w.start();
    try {
      await assert.rejects(w.runOnce({ context: fakeLambdaContext({ timeoutMs: 3000 }) }), /already running/);
    } finally {
      await w.stop();
    }
    assert.deepEqual(logger.lines, []);
  });

  it('with time to claim: handles the row and logs no such warning', async () => {
    await insertPullRows(db, 'enough', [{ key: 'e1' }]);
    const logger = memoryLogger();
    const { worker: w } = worker('enough', logger);

    const summary = await w.runOnce({ context: fakeLambdaContext({ timeoutMs: 8000 }) });

    assert.deepEqual({ claimed: summary.claimed, completed: summary.completed }, { claimed: 1, completed: 1 });
    assert.deepEqual(logger.lines, []);
  });
});
