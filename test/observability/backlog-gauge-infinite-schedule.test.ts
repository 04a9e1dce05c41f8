/**
 * The backlog gauges of a pass with rows at `scheduled_at = '-infinity'` or `'infinity'`, which
 * PostgreSQL's timestamptz takes and plain SQL can write. A row at `-infinity` is due since
 * forever and is aged from when it was written (`created_at`), so the backlog-age alarm fires when
 * it waits too long (here behind a key head in flight, as during a destination outage); a row at
 * `infinity` is never due and has no age. Either way the pass emits both gauges, finite, and logs
 * no failed stats read.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { handler as inboxRelay } from '../../functions/inbox-relay.ts';
import { createOutboxPoller } from '../../functions/outbox-poller.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { emfSamples } from '../helpers/emf.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

describe('backlog gauges with rows scheduled at -infinity and infinity (PostgreSQL)', () => {
  let db: TestDatabase;
  let outbox: string;
  let inbox: string;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 20 },
      inbox: { sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } } },
      lambda: { deadlineMarginMs: 1000 },
    });
    outbox = `"${db.schema}".outbox`;
    inbox = `"${db.schema}".inbox`;
  });
  after(async () => db?.drop());
  // The gauges are read at most once per 10 s per table (the gate row in the maintenance table).
  beforeEach(async () => db.query(`TRUNCATE ${outbox}, ${inbox}, "${db.schema}".queuebox_maintenance`));

  /** Runs `pass` in a fresh container (its own driver: the gauge's per-driver interval starts anew); the EMF samples and the logged lines. */
  async function inContainer(pass: () => Promise<unknown>) {
    const lines: string[] = [];
    const logger = createLogger({ serviceName: 'queuebox', logLevel: 'WARN' });
    setContainer({ config: db.config, driver: db.newDriver(), logger, env: {}, writeMetrics: (line) => lines.push(line) });
    try {
      const { lines: logged } = await captureStdout(pass, { stderr: true });
      return { samples: emfSamples(lines), logged };
    } finally {
      setContainer(undefined);
    }
  }

  const runPoller = () =>
    inContainer(() => createOutboxPoller({ buildDestinations: () => new Map([['main', new RecordingDestination()]]) })({ source: 'aws.events' }, createInvocationContext({ timeoutMs: 2500 })));

  const values = (samples: ReturnType<typeof emfSamples>, name: string) => samples.filter((s) => s.name === name).map((s) => s.value);

  it('outbox: a row at -infinity waiting 10 minutes behind its key head in flight makes the oldest-age gauge about 600 s; a parked row at infinity counts as pending, not in the age', async () => {
    await db.query(`INSERT INTO ${outbox} (topic, key, payload, state, claim_token, lease_expires_at, claimed_at)
      VALUES ('a.b', 'k1', '{"n":0}', 'processing', gen_random_uuid(), clock_timestamp() + interval '10 minutes', clock_timestamp())`);
    await db.query(`INSERT INTO ${outbox} (topic, key, payload, scheduled_at, created_at) VALUES ('a.b', 'k1', '{"n":1}', '-infinity', clock_timestamp() - interval '10 minutes')`);
    await db.query(`INSERT INTO ${outbox} (topic, key, payload, scheduled_at) VALUES ('a.b', 'k2', '{"n":2}', 'infinity')`);

    const { samples, logged } = await runPoller();

    assert.deepEqual(logged.filter((l) => /stats failed/.test(l)), [], 'no failed stats read');
    assert.deepEqual(values(samples, 'queuebox_outbox_messages_pending'), [2]);
    const [age, ...more] = values(samples, 'queuebox_outbox_oldest_pending_age_seconds');
    assert.equal(more.length, 0);
    assert.ok(age !== undefined && age >= 595 && age < 700, `about 600 s (from created_at), got ${age}`);
  });

  it('outbox: with only a row at infinity pending, the gauges say 1 pending and an oldest due age of 0', async () => {
    await db.query(`INSERT INTO ${outbox} (topic, key, payload, scheduled_at) VALUES ('a.b', 'k2', '{"n":2}', 'infinity')`);

    const { samples, logged } = await runPoller();

    assert.deepEqual(logged.filter((l) => /stats failed/.test(l)), [], 'no failed stats read');
    assert.deepEqual(values(samples, 'queuebox_outbox_messages_pending'), [1]);
    assert.deepEqual(values(samples, 'queuebox_outbox_oldest_pending_age_seconds'), [0]);
  });

  it('outbox: a row at -infinity whose created_at is -infinity too gets the largest age, a finite one', async () => {
    await db.query(`INSERT INTO ${outbox} (topic, key, payload, state, claim_token, lease_expires_at, claimed_at)
      VALUES ('a.b', 'k1', '{"n":0}', 'processing', gen_random_uuid(), clock_timestamp() + interval '10 minutes', clock_timestamp())`);
    await db.query(`INSERT INTO ${outbox} (topic, key, payload, scheduled_at, created_at) VALUES ('a.b', 'k1', '{"n":1}', '-infinity', '-infinity')`);

    const { samples } = await runPoller();

    const [age] = values(samples, 'queuebox_outbox_oldest_pending_age_seconds');
    assert.ok(age !== undefined && Number.isFinite(age) && age > 100 * 365 * 86_400, `finite and above a century, got ${age}`);
  });

  it('inbox relay: a push row at -infinity waiting 5 minutes behind its aggregate head in flight makes the oldest-age gauge about 300 s', async () => {
    await db.query(`INSERT INTO ${inbox} (source, idempotency_key, aggregate_id, payload, state, claim_token, lease_expires_at, claimed_at)
      VALUES ('shop', 'x-1', 'A', '{}', 'processing', gen_random_uuid(), clock_timestamp() + interval '10 minutes', clock_timestamp())`);
    await db.query(`INSERT INTO ${inbox} (source, idempotency_key, aggregate_id, payload, scheduled_at, created_at) VALUES ('shop', 'x-2', 'A', '{}', '-infinity', clock_timestamp() - interval '5 minutes')`);
    await db.query(`INSERT INTO ${inbox} (source, idempotency_key, aggregate_id, payload, scheduled_at) VALUES ('shop', 'y-1', 'B', '{}', 'infinity')`);

    const { samples, logged } = await inContainer(() => inboxRelay({}, fakeLambdaContext({ timeoutMs: 2500 })));

    assert.deepEqual(logged.filter((l) => /stats failed/.test(l)), [], 'no failed stats read');
    const [age] = values(samples, 'queuebox_inbox_oldest_pending_age_seconds');
    assert.ok(age !== undefined && age >= 295 && age < 400, `about 300 s (from created_at), got ${age}`);
  });
});
