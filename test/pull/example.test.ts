import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { createOrderWorker, ORDERS_PAID_DDL, type PaymentGateway } from '../../docs/examples/pull-worker-example.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { expireLease, insertPullRows, readPullRows } from './pull-fixtures.ts';

/** A gateway that, like a real payment API, returns the first result for a repeated key. */
function fakeGateway(): PaymentGateway & { calls: number; captures: Map<string, string>; beforeReply?: () => Promise<void> } {
  const gateway = {
    calls: 0,
    captures: new Map<string, string>(),
    beforeReply: undefined as undefined | (() => Promise<void>),
    async capture(request: { idempotencyKey: string; orderId: string }) {
      gateway.calls++;
      const hook = gateway.beforeReply;
      gateway.beforeReply = undefined;
      if (hook) await hook();
      let captureId = gateway.captures.get(request.idempotencyKey);
      if (!captureId) {
        captureId = `cap-${request.orderId}`;
        gateway.captures.set(request.idempotencyKey, captureId);
      }
      return { captureId };
    },
  };
  return gateway;
}

describe('docs/pull-workers.md example: order processing', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  before(async () => {
    db = await createTestDatabase();
    // The application's pool; its search path finds the application's tables in the test schema.
    pool = new pg.Pool({ connectionString: db.url, max: 4, options: `-c search_path=${db.schema}` });
    await pool.query(ORDERS_PAID_DDL);
  });
  after(async () => {
    await pool.end();
    await db.drop();
  });

  const config = () => parseConfig({ database: { url: db.url, schema: db.schema }, observability: { logLevel: 'SILENT' } });
  const paid = async () => (await pool.query('SELECT order_id, capture_id, amount_cents FROM orders_paid ORDER BY order_id')).rows;

  it('is the code the documentation shows', () => {
    const doc = readFileSync('docs/pull-workers.md', 'utf8');
    const example = readFileSync('docs/examples/pull-worker-example.ts', 'utf8');
    assert.ok(doc.includes(example.trim()), 'docs/pull-workers.md embeds docs/examples/pull-worker-example.ts verbatim');
  });

  it('writes the business row and completes the message in one transaction', async () => {
    await insertPullRows(db, 'orders', [
      { key: 'evt-1', aggregateId: 'o-1', payload: { orderId: 'o-1', amountCents: 1200 } },
      { key: 'evt-2', aggregateId: 'o-2', payload: { orderId: 'o-2', amountCents: 800 } },
    ]);
    const gateway = fakeGateway();
    const summary = await createOrderWorker({ pool, config: config(), gateway }).runOnce();
    assert.equal(summary.completed, 2);
    assert.deepEqual(await paid(), [
      { order_id: 'o-1', capture_id: 'cap-o-1', amount_cents: 1200 },
      { order_id: 'o-2', capture_id: 'cap-o-2', amount_cents: 800 },
    ]);
    assert.ok((await readPullRows(db, 'orders')).every((r) => r.state === 'processed'));
  });

  it('captures once and writes one row when a frozen worker loses its claim to another', async () => {
    const [id] = await insertPullRows(db, 'orders', [{ key: 'evt-3', aggregateId: 'o-3', payload: { orderId: 'o-3', amountCents: 500 } }]);
    const gateway = fakeGateway();
    const frozen = createOrderWorker({ pool, config: config(), gateway });
    const other = createOrderWorker({ pool, config: config(), gateway });
    let otherSummary;
    // While the first worker waits for the gateway, its lease runs out and another worker runs.
    gateway.beforeReply = async () => {
      await expireLease(db, id!);
      otherSummary = await other.runOnce();
    };
    const frozenSummary = await frozen.runOnce();
    assert.deepEqual([frozenSummary.completed, frozenSummary.claimsLost], [0, 1]);
    assert.equal(otherSummary!.completed, 1);
    assert.equal(gateway.calls, 2, 'the outside call ran twice');
    assert.equal(gateway.captures.size, 1, 'but was deduplicated on (source, idempotency_key)');
    assert.deepEqual((await paid()).filter((r) => r.order_id === 'o-3'), [{ order_id: 'o-3', capture_id: 'cap-o-3', amount_cents: 500 }]);
  });
});
