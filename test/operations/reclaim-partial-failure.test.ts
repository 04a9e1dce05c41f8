/**
 * The reclaim function counts what it did even when one of its two tables fails: the outbox and
 * inbox reclaims run side by side, and when the inbox statement fails (here its statement timeout,
 * the statement slowed by a trigger) the outbox reclaim has committed all the same
 * — its rows went back to pending or dead. Those are counted (docs/metrics.md: the reclaim function
 * counts the rows it marks dead, so the dead-message alarms see them), then the invocation fails.
 * Before, one failure threw away the other table's counts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { handler as reclaimHandler } from '../../functions/reclaim.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { METRICS } from '../../lib/observability/metric-names.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValue } from '../helpers/emf.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { insertOutboxRows } from '../helpers/outbox-pass-fixture.ts';

describe('reclaim function: counts under a partial failure', () => {
  let db: TestDatabase;
  const lines: string[] = [];
  before(async () => {
    db = await createTestDatabase({ outbox: { maxAttempts: 2 }, inbox: { relay: { maxAttempts: 2 } }, database: { statementTimeoutMs: 1000 } });
    setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env: {}, writeMetrics: (line) => lines.push(line) });
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  it('rows the outbox reclaim marked dead are counted even when the inbox reclaim fails', async () => {
    const outbox = `"${db.schema}".outbox`;
    const inbox = `"${db.schema}".inbox`;
    const [last] = await insertOutboxRows(db, [{ topic: 'orders', payload: { n: 1 } }]);
    await db.query(
      `UPDATE ${outbox} SET state = 'processing', attempt = 1, claim_token = gen_random_uuid(), key_first = true,
              claimed_at = clock_timestamp() - interval '2 minutes', lease_expires_at = clock_timestamp() - interval '1 minute'
        WHERE id = $1`,
      [last],
    );
    await db.query(`INSERT INTO ${inbox} (source, idempotency_key, aggregate_id, payload, state, attempt, claim_token, claimed_at, lease_expires_at, consumption)
                    VALUES ('shop', 'idem-1', 'a-1', '{}', 'processing', 0, gen_random_uuid(), clock_timestamp() - interval '2 minutes', clock_timestamp() - interval '1 minute', 'push')`);
    // The inbox reclaim outlasts its statement timeout (a trigger that sleeps in it: the reclaim
    // skips rows others hold locked, so a held row no longer makes it wait).
    await db.query(`CREATE FUNCTION "${db.schema}".slow_reclaim() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF current_query() LIKE '%lease_expires_at <= pg_catalog.statement_timestamp()%' THEN PERFORM pg_sleep(3); END IF;
        RETURN NULL;
      END $$`);
    await db.query(`CREATE TRIGGER slow_reclaim BEFORE UPDATE ON ${inbox} FOR EACH STATEMENT EXECUTE FUNCTION "${db.schema}".slow_reclaim()`);
    let failure: unknown;
    try {
      await reclaimHandler({ force: true }, fakeLambdaContext({ timeoutMs: 30_000 })).catch((e: unknown) => {
        failure = e;
      });
    } finally {
      await db.query(`DROP TRIGGER slow_reclaim ON ${inbox}`);
    }
    assert.ok(failure, 'the inbox reclaim failed (statement timeout), so the invocation failed');
    const state = (await db.query<{ state: string }>(`SELECT state FROM ${outbox} WHERE id = $1`, [last]))[0]!.state;
    assert.equal(state, 'dead', 'the outbox reclaim committed: the row went dead');
    assert.equal(emfValue(lines, METRICS.outboxMessages.name, { status: 'dead' }), 1, 'the row that went dead must be counted for the dead-message alarm');
  });
});
