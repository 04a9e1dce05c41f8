/**
 * A retention invocation ends by its deadline with nothing left running (docs/operations.md:
 * "until done or the deadline"; nothing of an invocation outlives it). Every DELETE is bounded by
 * the time to the deadline: a batch still running then is cancelled by the database, and the run
 * returns as incomplete. Before, the deadline was checked only between batches and a slow batch
 * ran on for up to `database.statementTimeoutMs` (30 s), past the invocation.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { handler as retentionHandler } from '../../functions/retention.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { waitUntil } from '../helpers/wait.ts';

describe('retention and the invocation deadline', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ retention: { enabled: true, batchSize: 10 } });
    setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  it('a slow batch is cancelled at the deadline and the handler answers before the invocation ends', async () => {
    await db.query(
      `INSERT INTO "${db.schema}".outbox (id, topic, payload, state, created_at, updated_at, scheduled_at)
       VALUES ($1, 't', '{}', 'sent', now() - interval '2000 hours', now() - interval '2000 hours', now() - interval '2000 hours')`,
      [randomUUID()],
    );
    // A DELETE that takes 30 s (as a batch on a large, busy table might).
    await db.query(`CREATE FUNCTION "${db.schema}".slow_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(30); RETURN OLD; END $$`);
    await db.query(`CREATE TRIGGER slow_delete BEFORE DELETE ON "${db.schema}".outbox FOR EACH ROW EXECUTE FUNCTION "${db.schema}".slow_delete()`);
    const timeoutMs = 8_000; // lambda.deadlineMarginMs 5000: the deadline is 3 s in
    const started = Date.now();
    const result = await retentionHandler({ source: 'aws.events' }, fakeLambdaContext({ timeoutMs }));
    const tookMs = Date.now() - started;
    assert.equal(result.complete, false, 'the deadline stopped the run');
    assert.equal(result.deleted.outbox, 0, 'the cancelled batch deleted nothing');
    assert.ok(tookMs < timeoutMs - 1_000, `the handler answered ${tookMs} ms in, before the invocation's end (${timeoutMs} ms)`);
    await waitUntil('no DELETE of the run is left', async () => (await db.query(`SELECT pid FROM pg_stat_activity WHERE query LIKE 'DELETE FROM%' AND position($1 in query) > 0 AND state = 'active'`, [db.schema])).length === 0, 2_000);
    const [row] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox`);
    assert.equal(row!.n, 1, 'the row is still there for the next run');
  });
});

describe('replay function and the invocation deadline', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({});
    setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  it('a replay still running at the deadline is cancelled and rolled back, and the handler answers before the invocation ends', async () => {
    const { handler: replayHandler } = await import('../../functions/replay.ts');
    const id = randomUUID();
    await db.query(`INSERT INTO "${db.schema}".outbox (id, topic, payload, state, last_error) VALUES ($1, 't', '{}', 'dead', 'boom')`, [id]);
    await db.query(`CREATE FUNCTION "${db.schema}".slow_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$`);
    await db.query(`CREATE TRIGGER slow_update BEFORE UPDATE ON "${db.schema}".outbox FOR EACH ROW EXECUTE FUNCTION "${db.schema}".slow_update()`);
    const timeoutMs = 8_000;
    const started = Date.now();
    await assert.rejects(replayHandler({ ids: [id] }, fakeLambdaContext({ timeoutMs })));
    const tookMs = Date.now() - started;
    assert.ok(tookMs < timeoutMs - 1_000, `the handler answered ${tookMs} ms in, before the invocation's end (${timeoutMs} ms)`);
    await waitUntil('no UPDATE of the replay is left', async () => (await db.query(`SELECT pid FROM pg_stat_activity WHERE query LIKE '%UPDATE%' AND position($1 in query) > 0 AND state = 'active' AND pid <> pg_backend_pid()`, [db.schema])).length === 0, 2_000);
    const [row] = await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".outbox WHERE id = $1`, [id]);
    assert.equal(row!.state, 'dead', 'nothing moved');
  });
});
