/**
 * The retention and reclaim functions take only the events they act on: their schedule's event,
 * `{}` or none, and for reclaim `"force": true | false`. Anything else is refused naming the key
 * before the database is reached, as the replay and migrate functions refuse theirs. Before,
 * both read nothing of the event: `{"dryRun": true}` made retention delete, and
 * `{"source": "aws.events", "force": "true"}` made reclaim run throttled, without a word.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import { handler as reclaimHandler } from '../../functions/reclaim.ts';
import { handler as retentionHandler } from '../../functions/retention.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';

/** What an EventBridge rule's schedule sends (a `schedule: rate(…)` of the deployed functions). */
const SCHEDULED_EVENT = {
  version: '0',
  id: '53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa',
  'detail-type': 'Scheduled Event',
  source: 'aws.events',
  account: '123456789012',
  time: '2026-12-06T16:00:00Z',
  region: 'eu-west-1',
  resources: ['arn:aws:events:eu-west-1:123456789012:rule/shop-prod-QueueboxRetentionEventsRuleSchedule1-1AB2C3D4'],
  detail: {},
};

/** A refusal by name: a `UsageError` whose message matches `pattern`. */
const refusal = (pattern: RegExp) => (error: Error) => {
  assert.equal(error.name, 'UsageError', error.message);
  assert.match(error.message, pattern);
  return true;
};

describe('the retention and reclaim functions refuse an event they do not act on', () => {
  let db: TestDatabase;
  const context = () => fakeLambdaContext({ timeoutMs: 30_000 });
  const count = async (table: 'outbox' | 'inbox', state: string) => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".${table} WHERE state = $1`, [state]))[0]!.n;
  const sentRows = (n: number) =>
    db.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state, updated_at) SELECT 't', '{}', 'sent', now() - interval '2 hours' FROM generate_series(1, $1::int)`, [n]);
  const expiredRow = () =>
    db.query(`INSERT INTO "${db.schema}".outbox (id, topic, payload, state, claim_token, claimed_at, lease_expires_at) VALUES ($1, 't', '{}', 'processing', gen_random_uuid(), now() - interval '1 minute', now() - interval '1 second')`, [randomUUID()]);

  before(async () => {
    // Sent rows older than 1 hour are past their age: any run of retention deletes them.
    db = await createTestDatabase({ retention: { enabled: true, outboxSentAfterHours: 1 } });
    setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
  });
  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
  });
  after(async () => {
    setContainer(undefined);
    await db.drop();
  });

  it('retention refuses every key but its schedule\'s, naming it, and deletes nothing', async () => {
    await sentRows(5);
    await assert.rejects(retentionHandler({ dryRun: true }, context()), refusal(/unknown key "dryRun".*no dry run/));
    await assert.rejects(retentionHandler({ force: true }, context()), refusal(/unknown key "force".*queuebox cleanup --force/));
    await assert.rejects(retentionHandler({ outboxSentAfterHours: 48 }, context()), refusal(/unknown key "outboxSentAfterHours".*configured ages/));
    await assert.rejects(retentionHandler({ ...SCHEDULED_EVENT, dryRun: true }, context()), refusal(/unknown key "dryRun"/));
    await assert.rejects(retentionHandler({ ...SCHEDULED_EVENT, detail: { dryRun: true } }, context()), refusal(/"detail": \{\}/));
    await assert.rejects(retentionHandler({ source: 'aws.event' }, context()), refusal(/"source" must be "aws\.events"/));
    await assert.rejects(retentionHandler('{}', context()), refusal(/the retention event is \{\}/));
    await assert.rejects(retentionHandler([], context()), refusal(/the retention event is \{\}/));
    assert.equal(await count('outbox', 'sent'), 5, 'nothing deleted');
  });

  it('retention runs on its schedule\'s event, on {} and on no event', async () => {
    for (const event of [SCHEDULED_EVENT, { source: 'aws.events' }, {}, undefined, null]) {
      await sentRows(2);
      const result = await retentionHandler(event, context());
      assert.deepEqual(result, { enabled: true, deleted: { outbox: 2, inbox: 0 }, complete: true }, JSON.stringify(event));
    }
  });

  it('reclaim refuses other keys and a force that is not true or false, naming them, and reclaims nothing', async () => {
    await expiredRow();
    await assert.rejects(reclaimHandler({ force: 'true' }, context()), refusal(/force must be true or false, got "true"/));
    await assert.rejects(reclaimHandler({ ...SCHEDULED_EVENT, force: 'true' }, context()), refusal(/force must be true or false/));
    await assert.rejects(reclaimHandler({ dryRun: true }, context()), refusal(/unknown key "dryRun"/));
    await assert.rejects(reclaimHandler({ Force: true, table: 'outbox' }, context()), refusal(/unknown keys "Force", "table"/));
    await assert.rejects(reclaimHandler('x', context()), refusal(/the reclaim event is \{\}/));
    assert.equal(await count('outbox', 'processing'), 1, 'nothing reclaimed');
  });

  it('reclaim keeps to the throttle on its schedule\'s event and on {"force": false}, and reclaims now on {}, no event and {"force": true}', async () => {
    // A reclaim ran a moment ago: the throttle's gate is closed.
    await db.driver.outboxReclaimExpired({ throttleMs: 60_000 });
    await db.driver.inboxReclaimExpired({ throttleMs: 60_000, maxAttempts: 5 });
    await expiredRow();
    for (const event of [SCHEDULED_EVENT, { force: false }, { ...SCHEDULED_EVENT, force: false }]) {
      assert.deepEqual(await reclaimHandler(event, context()), { outbox: 0, inbox: 0, outboxDead: 0, inboxDead: 0, throttled: true }, JSON.stringify(event));
    }
    for (const event of [{}, undefined, { force: true }, { ...SCHEDULED_EVENT, force: true }]) {
      assert.deepEqual(await reclaimHandler(event, context()), { outbox: 1, inbox: 0, outboxDead: 0, inboxDead: 0, throttled: false }, JSON.stringify(event));
      await expiredRow();
    }
  });
});
