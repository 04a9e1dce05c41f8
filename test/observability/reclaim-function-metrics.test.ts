/**
 * The scheduled reclaim function counts what it does as the passes' own reclaim step does: rows
 * whose last attempt's lease expired go `dead`, and they are counted in
 * `queuebox_outbox_messages_total` / `queuebox_inbox_messages_total` with `status="dead"` and
 * logged at ERROR — the dead-message alarms watch those counters, and the function shares the
 * reclaim throttle with the passes, so whichever runs first is the one that marks the rows dead.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { handler as reclaimHandler } from '../../functions/reclaim.ts';
import { METRICS } from '../../lib/observability/metric-names.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfValue } from '../helpers/emf.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { insertOutboxRows } from '../helpers/outbox-pass-fixture.ts';
import { RecordingLogger } from '../helpers/recording-logger.ts';

describe('reclaim function: rows whose last lease expired are counted dead', () => {
  let db: TestDatabase;
  const lines: string[] = [];
  const logger = new RecordingLogger();
  before(async () => {
    db = await createTestDatabase({ outbox: { maxAttempts: 2 }, inbox: { relay: { maxAttempts: 2 } } });
    const withContext = Object.assign(logger, { addContext: () => {} });
    setContainer({ config: db.config, driver: db.driver, logger: withContext as never, env: {}, writeMetrics: (line) => lines.push(line) });
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  it('counts and logs the outbox and inbox rows it marks dead, and the rows it returns', async () => {
    const outbox = `"${db.schema}".outbox`;
    const inbox = `"${db.schema}"."${db.config.tables.inbox}"`;
    const [last, first] = await insertOutboxRows(db, [
      { topic: 'orders', payload: { n: 1 } },
      { topic: 'orders', payload: { n: 2 } },
    ]);
    // `last`: its second and last attempt outlived its lease; `first`: its first attempt did.
    await db.query(
      `UPDATE ${outbox} SET state = 'processing', attempt = CASE WHEN id = $1 THEN 1 ELSE 0 END, claim_token = gen_random_uuid(), key_first = true,
              claimed_at = clock_timestamp() - interval '2 minutes', lease_expires_at = clock_timestamp() - interval '1 minute'
        WHERE id IN ($1, $2)`,
      [last, first],
    );
    await db.query(`INSERT INTO ${inbox} (source, idempotency_key, aggregate_id, payload, state, attempt, claim_token, claimed_at, lease_expires_at, consumption)
                    VALUES ('shop', 'idem-1', 'a-1', '{}', 'processing', 1, gen_random_uuid(), clock_timestamp() - interval '2 minutes', clock_timestamp() - interval '1 minute', 'push')`);

    const result = await reclaimHandler({ source: 'aws.events', 'detail-type': 'Scheduled Event' }, fakeLambdaContext({ timeoutMs: 30_000 }));
    assert.deepEqual([result.outbox, result.outboxDead, result.inbox, result.inboxDead], [1, 1, 0, 1]);
    const states = await db.query<{ id: string; state: string }>(`SELECT id, state FROM ${outbox} ORDER BY sequence`);
    assert.deepEqual(states.map((r) => r.state), ['dead', 'pending']);
    assert.equal((await db.query<{ state: string }>(`SELECT state FROM ${inbox}`))[0]!.state, 'dead');

    assert.equal(emfValue(lines, METRICS.outboxMessages.name, { status: 'dead' }), 1);
    assert.equal(emfValue(lines, METRICS.inboxMessages.name, { status: 'dead' }), 1);
    assert.equal(emfValue(lines, METRICS.outboxReclaimed.name), 1);
    const errors = logger.at('error').map((e) => [e.message, e.extra.count]);
    assert.deepEqual(errors, [
      ['outbox rows dead: the lease of their last attempt expired during the delivery', 1],
      ['inbox rows dead: the lease of their last attempt expired during the forward', 1],
    ]);
  });
});
