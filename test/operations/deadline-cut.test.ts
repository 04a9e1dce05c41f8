/**
 * A replay or reclaim the invocation's deadline cancels fails saying so: cancelled at the
 * deadline (the function's timeout less lambda.deadlineMarginMs), what moved, and what to do.
 * Before, it failed as `database: canceling statement due to statement timeout`, which sends the
 * operator to database.statementTimeoutMs, which had not ended it. A statement held by a lock
 * another connection keeps makes the statement outlive the deadline, whatever the machine.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import { handler as reclaimHandler } from '../../functions/reclaim.ts';
import { handler as replayHandler } from '../../functions/replay.ts';
import { TransientDatabaseError } from '../../lib/errors.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';

/** The rejection of `promise` (fails when it resolves). */
async function rejection(promise: Promise<unknown>): Promise<Error> {
  return promise.then(
    (value) => assert.fail(`expected a failure, got ${JSON.stringify(value)}`),
    (error: unknown) => error as Error,
  );
}

/** Whether an error under `error` is PostgreSQL's statement timeout (kept as the cause). */
function causedByStatementTimeout(error: unknown): boolean {
  for (let e: unknown = error; e instanceof Error; e = e.cause) if (e instanceof TransientDatabaseError && e.code === '57014') return true;
  return false;
}

function setup(config: Parameters<typeof createTestDatabase>[0]) {
  const state = {} as { db: TestDatabase };
  before(async () => {
    state.db = await createTestDatabase(config);
    setContainer({ config: state.db.config, driver: state.db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
  });
  beforeEach(async () => {
    await state.db.query(`DELETE FROM "${state.db.schema}".outbox`);
    await state.db.query(`DELETE FROM "${state.db.schema}".inbox`);
    await state.db.query(`DELETE FROM "${state.db.schema}".queuebox_maintenance`);
  });
  after(async () => {
    setContainer(undefined);
    await state.db.drop();
  });
  /** Runs `work` while another connection holds what `lockSql` takes, in a transaction ended afterwards. */
  const whileLocked = async <T>(lockSql: string, work: () => Promise<T>): Promise<T> => {
    const blocker = await state.db.pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(lockSql);
      return await work();
    } finally {
      await blocker.query('ROLLBACK');
      blocker.release();
    }
  };
  const deadRow = async () => {
    const id = randomUUID();
    await state.db.query(`INSERT INTO "${state.db.schema}".outbox (id, topic, payload, state, last_error) VALUES ($1, 't', '{}', 'dead', 'boom')`, [id]);
    return id;
  };
  const stateOf = async (table: 'outbox' | 'inbox', id: string) => (await state.db.query<{ state: string }>(`SELECT state FROM "${state.db.schema}".${table} WHERE id = $1`, [id]))[0]!.state;
  return { state, whileLocked, deadRow, stateOf };
}

describe('replay and reclaim functions cut at the invocation deadline', () => {
  // A 3 s invocation less the 1 s margin: the statements have 2 s.
  const { state, whileLocked, deadRow, stateOf } = setup({ lambda: { deadlineMarginMs: 1000 } });
  const context = () => fakeLambdaContext({ timeoutMs: 3000 });

  it('a replay whose move waits on a row lock past the deadline fails naming the deadline, and nothing moves', async () => {
    const id = await deadRow();
    const schema = state.db.schema;
    // With and without the confirmation: a bounded move of at most 100 rows, and the plain one.
    for (const event of [{ ids: [id] }, { ids: [id], yes: true }]) {
      const error = await whileLocked(`SELECT 1 FROM "${schema}".outbox WHERE id = '${id}' FOR UPDATE`, () => rejection(replayHandler(event, context())));
      assert.equal(error.name, 'InvocationDeadlineError', error.message);
      assert.match(error.message, /^replay: the database cancelled the replay at the invocation's deadline, \d+ ms after the run started \(the function's timeout less lambda\.deadlineMarginMs, 1000 ms; at least half the invocation\), not by database\.statementTimeoutMs/);
      assert.match(error.message, /; nothing moved \(the move is one transaction, rolled back\)\./);
      assert.match(error.message, /Narrow the filter .* or raise the function's timeout \(custom\.queuebox\.functions\.replay\.timeout, at most 900 s\)$/);
      assert.doesNotMatch(error.message, /canceling statement/);
      assert.ok(causedByStatementTimeout(error), 'the statement timeout is kept as the cause');
      assert.equal(await stateOf('outbox', id), 'dead', 'nothing moved');
    }
  });

  it('a reclaim whose outbox statement waits on a table lock past the deadline fails naming the deadline; the inbox rows it returned stay returned', async () => {
    const { db } = state;
    const outboxId = randomUUID();
    const inboxId = randomUUID();
    await db.query(
      `INSERT INTO "${db.schema}".outbox (id, topic, payload, state, claim_token, claimed_at, lease_expires_at) VALUES ($1, 't', '{}', 'processing', gen_random_uuid(), now() - interval '1 minute', now() - interval '1 second')`,
      [outboxId],
    );
    await db.query(
      `INSERT INTO "${db.schema}".inbox (id, source, idempotency_key, payload, state, claim_token, claimed_at, lease_expires_at) VALUES ($1, 'src', $2, '{}', 'processing', gen_random_uuid(), now() - interval '1 minute', now() - interval '1 second')`,
      [inboxId, randomUUID()],
    );
    const error = await whileLocked(`LOCK TABLE "${db.schema}".outbox IN EXCLUSIVE MODE`, () => rejection(reclaimHandler({}, context())));
    assert.equal(error.name, 'InvocationDeadlineError', error.message);
    assert.match(error.message, /^reclaim: the database cancelled the reclaim of the outbox at the invocation's deadline, \d+ ms after the run started \(the function's timeout less lambda\.deadlineMarginMs, 1000 ms; at least half the invocation\), not by database\.statementTimeoutMs/);
    assert.match(error.message, /; it returned no row \(a table's reclaim commits chunk by chunk; the chunk the cut cancelled rolled back alone\): the expired rows left are still processing, for the next reclaim; the inbox's reclaim finished: 1 back to pending and 0 dead\./);
    assert.match(error.message, /Raise the function's timeout \(custom\.queuebox\.functions\.reclaim\.timeout\)/);
    assert.ok(causedByStatementTimeout(error), 'the statement timeout is kept as the cause');
    assert.equal(await stateOf('outbox', outboxId), 'processing', 'the outbox row is still processing');
    assert.equal(await stateOf('inbox', inboxId), 'pending', 'the inbox row the other statement reclaimed stays pending');
  });
});

describe('a statement timeout of the configuration in the replay function', () => {
  // database.statementTimeoutMs ends the statement long before the deadline of a 30 s invocation.
  const { state, whileLocked, deadRow, stateOf } = setup({ database: { statementTimeoutMs: 500 } });

  it('is reported as the statement timeout it is, not as the deadline', async () => {
    const id = await deadRow();
    const error = await whileLocked(`SELECT 1 FROM "${state.db.schema}".outbox WHERE id = '${id}' FOR UPDATE`, () => rejection(replayHandler({ ids: [id], yes: true }, fakeLambdaContext({ timeoutMs: 30_000 }))));
    assert.equal(error.name, 'TransientDatabaseError', error.message);
    assert.match(error.message, /statement timeout/);
    assert.equal(await stateOf('outbox', id), 'dead');
  });
});
