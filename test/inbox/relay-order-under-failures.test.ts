/**
 * Relay order per aggregate with several concurrent relay passes and rows whose outbox
 * insert fails (a trigger refuses a chosen row a few times), so the batched forward falls back
 * to row-by-row forwards and retries with backoff.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';

describe('relay order per aggregate under failures and concurrent passes', () => {
  let db: TestDatabase;
  const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
  before(async () => {
    db = await createTestDatabase({
      inbox: {
        relay: { batchSize: 7, retryBaseDelayMs: 5, maxAttempts: 20, pollIntervalMs: 5, maxPollIntervalMs: 20 },
        sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } }, crm: { type: 'http', path: '/crm', auth: { type: 'none' } } },
      },
    });
    const s = `"${db.schema}"`;
    await db.query(`CREATE TABLE ${s}.fail_budget (k text PRIMARY KEY, left_ int NOT NULL, seq text NOT NULL)`);
    // nextval is not rolled back with the refused insert: the budget of failures really runs out
    await db.query(`CREATE FUNCTION ${s}.flaky() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE b ${s}.fail_budget;
      BEGIN
        SELECT * INTO b FROM ${s}.fail_budget WHERE k = NEW.headers->>'x-idempotency-key';
        IF FOUND AND nextval(b.seq) <= b.left_ THEN RAISE EXCEPTION 'flaky outbox refuses %', b.k; END IF;
        RETURN NEW;
      END $$`);
    await db.query(`CREATE TRIGGER flaky BEFORE INSERT ON ${s}.outbox FOR EACH ROW EXECUTE FUNCTION ${s}.flaky()`);
  });
  after(async () => db.drop());

  it('every row of every aggregate reaches the outbox once, in receive order, with 3 relays racing', async () => {
    const aggregates = 12;
    const perAggregate = 8;
    for (let i = 0; i < perAggregate; i++) {
      for (let a = 0; a < aggregates; a++) {
        const source = a % 2 === 0 ? 'shop' : 'crm';
        const key = `${a}-${i}`;
        await db.driver.inboxInsert({ source, idempotencyKey: key, eventType: 'e', aggregateId: `agg-${Math.floor(a / 2)}`, payload: { a, i }, consumption: 'push' });
        if ((a * 7 + i * 3) % 5 === 0) {
          const seq = `"${db.schema}".fail_${a}_${i}`;
          await db.query(`CREATE SEQUENCE ${seq}`);
          await db.query(`INSERT INTO "${db.schema}".fail_budget VALUES ($1, $2, $3)`, [key, 1 + ((a + i) % 3), seq]);
        }
      }
    }
    const drivers: Driver[] = [db.driver, db.newDriver(), db.newDriver()];
    const deadlineAt = Date.now() + 60_000;
    const pass = (driver: Driver) =>
      runRelayPass({
        config: db.config,
        driver,
        logger,
        metrics: new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} }),
        deadline: createDeadline(fakeLambdaContext({ timeoutMs: 4_000 }), 500),
      });
    for (;;) {
      await Promise.all(drivers.map(pass));
      const [open] = await db.query<{ n: string }>(`SELECT count(*)::text AS n FROM "${db.schema}".inbox WHERE state IN ('pending', 'processing')`);
      if (open!.n === '0' || Date.now() > deadlineAt) break;
    }
    const states = await db.query<{ state: string; n: string }>(`SELECT state, count(*)::text AS n FROM "${db.schema}".inbox GROUP BY state`);
    assert.deepEqual(states, [{ state: 'processed', n: String(aggregates * perAggregate) }]);
    const out = await db.query<{ key: string; k: string }>(`SELECT key, headers->>'x-idempotency-key' AS k FROM "${db.schema}".outbox ORDER BY sequence`);
    assert.equal(out.length, aggregates * perAggregate, 'each row once');
    assert.equal(new Set(out.map((r) => r.k)).size, out.length, 'no duplicates');
    const byKey = new Map<string, number[]>();
    for (const r of out) {
      const [, i] = r.k.split('-').map(Number);
      byKey.set(r.key, [...(byKey.get(r.key) ?? []), i!]);
    }
    for (const [key, order] of byKey) assert.deepEqual(order, [...order].sort((x, y) => x - y), `order of ${key}`);
  });
});
