/**
 * A reclaim cut short after some of its chunks committed (PostgreSQL commits a reclaim chunk by
 * chunk) says so, and counts what those chunks did: the reclaim function fails naming the
 * deadline and the rows returned and made dead before the cut, and writes their metrics (the
 * dead-message alarms see them); `queuebox reclaim` (`reclaimNow`) fails with those counts in
 * its error and its message. Before, a table's reclaim was one statement: cut, it returned no row.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { handler as reclaimHandler } from '../../functions/reclaim.ts';
import { reclaimChunking, RECLAIM_CHUNK_ROWS } from '../../lib/db/postgres/fenced-writes.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { METRICS } from '../../lib/observability/metric-names.ts';
import { ReclaimIncompleteError, reclaimNow } from '../../lib/operations/reclaim-now.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValue } from '../helpers/emf.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';

describe('a reclaim cut short after a chunk committed', () => {
  let db: TestDatabase;
  const lines: string[] = [];
  before(async () => {
    // A 3 s invocation less the 1 s margin: the statements have 2 s.
    db = await createTestDatabase({ outbox: { maxAttempts: 2 }, lambda: { deadlineMarginMs: 1000 } });
    setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env: {}, writeMetrics: (line) => lines.push(line) });
  });
  beforeEach(async () => {
    reclaimChunking.rows = 3;
    lines.length = 0;
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
    // Six expired rows, oldest lease first; the second is at its last attempt (1 of 2): it goes dead.
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state, attempt, max_attempts, claim_token, claimed_at, lease_expires_at)
      SELECT 'orders', '{}', 'processing', CASE WHEN g = 2 THEN 1 ELSE 0 END, 2, gen_random_uuid(), now() - interval '5 minutes', now() - (60 - g) * interval '1 second'
        FROM generate_series(1, 6) g`);
  });
  afterEach(async () => {
    reclaimChunking.rows = RECLAIM_CHUNK_ROWS;
    await db.query(`DROP TRIGGER IF EXISTS reclaim_watch ON "${db.schema}".outbox`);
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  /** Every reclaim statement on the outbox after the first one sleeps 30 s (`cancel: 'sleep'`) or fails as cancelled (57014). */
  async function laterChunks(cancel: 'sleep' | 'fail'): Promise<void> {
    const s = `"${db.schema}"`;
    await db.query(`DROP SEQUENCE IF EXISTS ${s}.reclaim_statements; CREATE SEQUENCE ${s}.reclaim_statements`);
    await db.query(`CREATE OR REPLACE FUNCTION ${s}.reclaim_watch() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF current_query() LIKE '%lease_expires_at <= pg_catalog.statement_timestamp()%' AND nextval('${s}.reclaim_statements') >= 2 THEN
          ${cancel === 'sleep' ? 'PERFORM pg_sleep(30)' : `RAISE EXCEPTION USING ERRCODE = 'query_canceled', MESSAGE = 'canceling statement due to statement timeout'`};
        END IF;
        RETURN NULL;
      END $$`);
    await db.query(`CREATE TRIGGER reclaim_watch AFTER UPDATE ON ${s}.outbox FOR EACH STATEMENT EXECUTE FUNCTION ${s}.reclaim_watch()`);
  }
  const states = async () => (await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".outbox ORDER BY lease_expires_at NULLS FIRST, state`)).map((r) => r.state).sort();

  it('the reclaim function fails naming the deadline and the rows its committed chunks returned and made dead, and counts them', async () => {
    await laterChunks('sleep');
    const error = await reclaimHandler({}, fakeLambdaContext({ timeoutMs: 3000 })).then(
      (value) => assert.fail(`expected a failure, got ${JSON.stringify(value)}`),
      (e: unknown) => e as Error,
    );
    assert.equal(error.name, 'InvocationDeadlineError', error.message);
    assert.match(error.message, /^reclaim: the database cancelled the reclaim of the outbox at the invocation's deadline/);
    assert.match(
      error.message,
      /; it returned 2 rows to pending and made 1 dead in the chunks it committed before the cut, counted \(a table's reclaim commits chunk by chunk; the chunk the cut cancelled rolled back alone\): the expired rows left are still processing, for the next reclaim;/,
    );
    assert.equal(emfValue(lines, METRICS.outboxReclaimed.name), 2, 'the rows the committed chunk returned are counted');
    assert.equal(emfValue(lines, METRICS.outboxMessages.name, { status: 'dead' }), 1, 'the row it made dead reaches the dead-message alarm');
    assert.deepEqual(await states(), ['dead', 'pending', 'pending', 'processing', 'processing', 'processing']);
  });

  it('queuebox reclaim (reclaimNow) fails with the counts of the committed chunks, and says what they did', async () => {
    await laterChunks('fail');
    const error = await reclaimNow({ driver: db.driver, config: db.config, throttled: false }).then(
      (value) => assert.fail(`expected a failure, got ${JSON.stringify(value)}`),
      (e: unknown) => e as Error,
    );
    assert.ok(error instanceof ReclaimIncompleteError, String(error));
    assert.deepEqual(error.counts, { outbox: 2, inbox: 0, outboxDead: 1, inboxDead: 0 });
    assert.deepEqual(error.failed, ['outbox']);
    assert.match(error.message, /^reclaim failed: database: canceling statement due to statement timeout; the outbox's reclaim committed 2 back to pending and 1 dead before it stopped \(the rest are still processing: run it again\)$/);
  });
});
