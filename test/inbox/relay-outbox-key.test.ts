import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Driver, InboxMessageInput } from '../../lib/db/driver.ts';
import { relayOutboxKey, SCOPED_KEY_MAX_LENGTH } from '../../lib/inbox/outbox-key.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';

const sources = {
  shop: { type: 'http', path: '/shop', auth: { type: 'none' } },
  crm: { type: 'http', path: '/crm', auth: { type: 'none' } },
} as const;

describe('relayed outbox keys: the form of the key', () => {
  it('scope the aggregate by its source; no aggregate, no key; the aggregate alone on request', () => {
    assert.equal(relayOutboxKey('shop', 'order-1', 'source-and-aggregate'), 'shop:order-1');
    assert.equal(relayOutboxKey('shop', 'a:b', 'source-and-aggregate'), 'shop:a:b', 'the first colon ends the source: source names have none');
    assert.equal(relayOutboxKey('shop', null, 'source-and-aggregate'), null);
    assert.equal(relayOutboxKey('shop', '', 'source-and-aggregate'), null);
    assert.equal(relayOutboxKey('shop', 'order-1', 'aggregate'), 'order-1');
  });

  it('write a SHA-256 digest after `<source>#` when the scoped key would pass 128 characters, so a FIFO group id always fits', () => {
    const fits = 'x'.repeat(SCOPED_KEY_MAX_LENGTH - 'shop:'.length);
    assert.equal(relayOutboxKey('shop', fits, 'source-and-aggregate'), `shop:${fits}`);
    const long = `${fits}y`;
    const digest = relayOutboxKey('shop', long, 'source-and-aggregate')!;
    assert.equal(digest, `shop#${createHash('sha256').update(long).digest('hex')}`);
    const longest = relayOutboxKey('a'.repeat(63), 'é'.repeat(255), 'source-and-aggregate')!;
    assert.ok(longest.length <= SCOPED_KEY_MAX_LENGTH && /^[a-z0-9_-]+#[0-9a-f]{64}$/.test(longest), longest);
    assert.notEqual(relayOutboxKey('shop', `${long}z`, 'source-and-aggregate'), digest);
  });
});

for (const outboxKey of ['source-and-aggregate', 'aggregate'] as const) {
  describe(`relayed outbox keys against PostgreSQL (inbox.relay.outboxKey: ${outboxKey})`, () => {
    let db: TestDatabase;
    let inbox: string;
    let outbox: string;
    const logger = createLogger({ serviceName: 'test', logLevel: 'SILENT' });
    before(async () => {
      db = await createTestDatabase({ inbox: { relay: { batchSize: 10, outboxKey }, sources } });
      inbox = `"${db.schema}".inbox`;
      outbox = `"${db.schema}".outbox`;
    });
    after(async () => db.drop());
    beforeEach(async () => {
      await db.query(`TRUNCATE ${inbox}, ${outbox}, "${db.schema}".queuebox_maintenance`);
    });

    const store = (source: string, key: string, extra: Partial<InboxMessageInput> = {}) =>
      db.driver.inboxInsert({ source, idempotencyKey: key, eventType: 'created', payload: { key }, consumption: 'push', ...extra });
    const pass = (driver: Driver = db.driver) =>
      runRelayPass({
        config: db.config,
        driver,
        logger,
        metrics: new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} }),
        deadline: createDeadline(fakeLambdaContext({ timeoutMs: 20_000 }), db.config.lambda.deadlineMarginMs),
        mode: 'drain',
      });
    const keyOf = async (idempotencyKey: string) =>
      (await db.query<{ key: string | null }>(`SELECT key FROM ${outbox} WHERE headers ->> 'x-idempotency-key' = $1`, [idempotencyKey]))[0]?.key;
    /** An outbox row as the relay wrote it before this version (or under the other setting): `key` and `x-source`. */
    const earlierRelayedRow = (source: string, key: string, state = 'pending') =>
      db.query(`INSERT INTO ${outbox} (topic, key, payload, headers, state) VALUES ('t', $1, '{}', jsonb_build_object('x-source', $2::text, 'x-inbox-id', gen_random_uuid()::text), $3)`, [key, source, state]);

    if (outboxKey === 'source-and-aggregate') {
      it("never let one source's failing outbox row hold another source's row of the same aggregate id", async () => {
        await store('shop', 'shop-1', { aggregateId: 'order-1' });
        await store('crm', 'crm-1', { aggregateId: 'order-1' });
        assert.equal((await pass()).forwarded, 2);
        const [first] = await db.driver.outboxClaimMany({ limit: 1, leaseMs: 60_000 });
        assert.equal(first!.headers['x-source'], 'shop');
        // shop's row fails at its destination: a retry a minute out holds its key
        assert.deepEqual(await db.driver.outboxRetryMany({ items: [{ id: first!.id, token: first!.claimToken, delayMs: 60_000, error: 'throttled' }] }), [first!.id]);
        const next = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 60_000 });
        assert.deepEqual(next.map((r) => [r.headers['x-source'], r.key]), [['crm', 'crm:order-1']], "crm's row is not held by shop's retry");
      });
    } else {
      it('write the aggregate id alone as key: rows of one aggregate id share a key across sources', async () => {
        await store('shop', 'shop-1', { aggregateId: 'order-1' });
        await store('crm', 'crm-1', { aggregateId: 'order-1' });
        assert.equal((await pass()).forwarded, 2);
        assert.deepEqual([await keyOf('shop-1'), await keyOf('crm-1')], ['order-1', 'order-1']);
      });
    }

    const other = outboxKey === 'source-and-aggregate' ? 'aggregate' : 'source-and-aggregate';
    it(`keep the ${other} key of an aggregate while an open outbox row relayed from its source has it (batched forward), then change over`, async () => {
      await earlierRelayedRow('shop', relayOutboxKey('shop', 'order-7', other)!);
      await store('shop', 'shop-7a', { aggregateId: 'order-7' });
      await store('crm', 'crm-7a', { aggregateId: 'order-7' });
      await store('shop', 'shop-8a', { aggregateId: 'order-8' });
      assert.equal((await pass()).forwarded, 3);
      assert.equal(await keyOf('shop-7a'), relayOutboxKey('shop', 'order-7', other), 'behind the open row of its aggregate, under the same key');
      assert.equal(await keyOf('crm-7a'), relayOutboxKey('crm', 'order-7', outboxKey), "another source's open row is not this aggregate's");
      assert.equal(await keyOf('shop-8a'), relayOutboxKey('shop', 'order-8', outboxKey));
      // every open row under the earlier key is finished: the next row changes over
      await db.query(`UPDATE ${outbox} SET state = 'sent' WHERE key = $1`, [relayOutboxKey('shop', 'order-7', other)]);
      await store('shop', 'shop-7b', { aggregateId: 'order-7' });
      assert.equal((await pass()).forwarded, 1);
      assert.equal(await keyOf('shop-7b'), relayOutboxKey('shop', 'order-7', outboxKey));
    });

    it(`keep the ${other} key of an aggregate while an open outbox row relayed from its source has it (row-by-row forward)`, async () => {
      await earlierRelayedRow('shop', relayOutboxKey('shop', 'order-9', other)!, 'processing');
      await earlierRelayedRow('shop', relayOutboxKey('shop', 'order-10', other)!, 'dead');
      await store('shop', 'shop-9a', { aggregateId: 'order-9' });
      await store('shop', 'shop-10a', { aggregateId: 'order-10' });
      const base = db.newDriver();
      const oneByOne: Driver = Object.create(base, { inboxForwardMany: { value: async () => Promise.reject(new Error('statement timeout')) } });
      assert.equal((await pass(oneByOne)).forwarded, 2);
      assert.equal(await keyOf('shop-9a'), relayOutboxKey('shop', 'order-9', other), 'a processing row holds the key too');
      assert.equal(await keyOf('shop-10a'), relayOutboxKey('shop', 'order-10', outboxKey), 'a dead row does not');
    });
  });
}
