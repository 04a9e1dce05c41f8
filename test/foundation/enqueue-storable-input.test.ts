/**
 * `enqueue` refuses a message the database cannot store with a ValidationError naming the field,
 * before any statement, so the caller's transaction (and its business change) stays usable: NUL
 * characters and lone UTF-16 surrogates in the topic, key, header names and values or payload (the
 * rule the inbox applies to what senders post), a delay or schedule beyond what the databases can
 * add, and a default `maxAttempts` outside 1–1000. What it can store, it stores as sent: the text
 * `\\u0000` (a backslash, then `u0000`) holds no NUL.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { enqueue } from '../../lib/outbox/enqueue.ts';
import { MAX_ENQUEUE_DELAY_MS } from '../../lib/outbox/validate-message.ts';
import { ValidationError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('enqueue of text and values the database cannot store', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
    await db.query(`CREATE TABLE "${db.schema}".business (v text)`);
  });
  after(async () => db.drop());

  /** Runs enqueue inside BEGIN after a business write; reports the error and whether the business write still commits. */
  async function attempt(message: unknown, options: Record<string, unknown> = {}): Promise<{ error: unknown; businessCommitted: boolean; stored?: { topic: string; key: string | null; payload: string } }> {
    const client = await db.pool.connect();
    const marker = `m-${Math.random()}`;
    let error: unknown;
    let id: string | undefined;
    try {
      await client.query('BEGIN');
      await client.query(`INSERT INTO "${db.schema}".business VALUES ($1)`, [marker]);
      try {
        id = await enqueue(client as never, message as never, { schema: db.schema, ...options });
      } catch (e) {
        error = e;
      }
      try {
        await client.query('COMMIT');
      } catch {
        await client.query('ROLLBACK').catch(() => {});
      }
    } finally {
      client.release();
    }
    const businessCommitted = (await db.query(`SELECT 1 FROM "${db.schema}".business WHERE v = $1`, [marker])).length === 1;
    const stored = id === undefined ? undefined : (await db.query<{ topic: string; key: string | null; payload: string }>(`SELECT topic, key, payload::text AS payload FROM "${db.schema}".outbox WHERE id = $1`, [id]))[0];
    return { error, businessCommitted, ...(stored ? { stored } : {}) };
  }

  const refused: Array<[what: string, message: unknown, field: string, options?: Record<string, unknown>]> = [
    ['a lone surrogate in the payload', { topic: 't', payload: { s: 'a\ud800b' } }, 'message.payload'],
    ['a lone low surrogate in a payload property name', { topic: 't', payload: { ['\udc00']: 1 } }, 'message.payload'],
    ['a NUL in the payload', { topic: 't', payload: { s: 'a\u0000b' } }, 'message.payload'],
    ['a NUL after an escaped backslash in the payload', { topic: 't', payload: { s: '\\\u0000' } }, 'message.payload'],
    ['a lone surrogate in a header value', { topic: 't', payload: {}, headers: { 'x-h': '\udc00' } }, 'message.headers.x-h'],
    ['a NUL in a header name', { topic: 't', payload: {}, headers: { 'x\u0000h': 'v' } }, 'message.headers.x\u0000h'],
    ['a NUL in the topic', { topic: 'order\u0000paid', payload: {} }, 'message.topic'],
    ['a lone surrogate in the topic', { topic: 'order.\ud83d', payload: {} }, 'message.topic'],
    ['a NUL in the key', { topic: 't', key: 'k\u0000', payload: {} }, 'message.key'],
    ['a lone surrogate in the key (it would be stored as U+FFFD, merging keys)', { topic: 't', key: 'order-\ud800', payload: {} }, 'message.key'],
    ['a payload whose toJSON returns a string', { topic: 't', payload: { toJSON: () => 'not an object' } }, 'message.payload'],
    ['a payload whose toJSON returns an array', { topic: 't', payload: { toJSON: () => [1] } }, 'message.payload'],
    ['a delayMs beyond what the database can add', { topic: 't', payload: {}, delayMs: 1e300 }, 'message.delayMs'],
    ['a delayMs just over the limit', { topic: 't', payload: {}, delayMs: MAX_ENQUEUE_DELAY_MS + 1 }, 'message.delayMs'],
    ['a scheduledAt after the year 9999', { topic: 't', payload: {}, scheduledAt: new Date('+010000-01-01T00:00:00Z') }, 'message.scheduledAt'],
    ['a scheduledAt before the year 1', { topic: 't', payload: {}, scheduledAt: new Date('-000001-12-31T00:00:00Z') }, 'message.scheduledAt'],
    ['options.maxAttempts 0', { topic: 't', payload: {} }, 'options.maxAttempts', { maxAttempts: 0 }],
    ['options.maxAttempts 1.5', { topic: 't', payload: {} }, 'options.maxAttempts', { maxAttempts: 1.5 }],
    ['options.maxAttempts 5000 (above 1000, as for message.maxAttempts)', { topic: 't', payload: {} }, 'options.maxAttempts', { maxAttempts: 5000 }],
  ];
  for (const [what, message, field, options] of refused) {
    it(`refuses ${what} with a ValidationError naming ${JSON.stringify(field)}, and the caller's transaction still commits`, async () => {
      const { error, businessCommitted, stored } = await attempt(message, options);
      assert.ok(error instanceof ValidationError, `expected a ValidationError, got ${(error as Error)?.constructor?.name}: ${(error as Error)?.message}`);
      assert.equal(error.field, field);
      assert.equal(stored, undefined);
      assert.ok(businessCommitted, 'the business change of the caller transaction was lost (transaction aborted by enqueue)');
    });
  }

  it('stores the text \\u0000 (an escaped backslash, no NUL) as sent, as the inbox does', async () => {
    const { error, stored } = await attempt({ topic: 't', payload: { path: 'C:\\u0000\\dir', odd: '\\\\u0000' } });
    assert.equal(error, undefined, `refused: ${(error as Error)?.message}`);
    assert.deepEqual(JSON.parse(stored!.payload), { path: 'C:\\u0000\\dir', odd: '\\\\u0000' });
  });

  it('stores surrogate pairs (emoji) in topic, key, headers and payload as sent', async () => {
    const { error, stored } = await attempt({ topic: 'order.😀', key: 'k-😀', headers: { 'x-😀': '😀' }, payload: { '😀': '\ud83d\ude00' } });
    assert.equal(error, undefined, `refused: ${(error as Error)?.message}`);
    assert.deepEqual([stored!.topic, stored!.key, JSON.parse(stored!.payload)], ['order.😀', 'k-😀', { '😀': '😀' }]);
  });

  it('stores a payload whose toJSON returns an object, as that object', async () => {
    const { error, stored } = await attempt({ topic: 't', payload: { toJSON: () => ({ a: 1 }) } });
    assert.equal(error, undefined, `refused: ${(error as Error)?.message}`);
    assert.deepEqual(JSON.parse(stored!.payload), { a: 1 });
  });

  it('accepts the longest delay and the edges of the schedule range, and options.maxAttempts 1000', async () => {
    for (const [message, options] of [
      [{ topic: 't', payload: {}, delayMs: MAX_ENQUEUE_DELAY_MS }, {}],
      [{ topic: 't', payload: {}, scheduledAt: new Date('9999-12-31T23:59:59.999Z') }, {}],
      [{ topic: 't', payload: {}, scheduledAt: new Date('0001-01-01T00:00:00.000Z') }, {}],
      [{ topic: 't', payload: {} }, { maxAttempts: 1000 }],
    ] as const) {
      const { error, stored } = await attempt(message, options);
      assert.equal(error, undefined, `refused ${JSON.stringify(message)}: ${(error as Error)?.message}`);
      assert.ok(stored);
    }
  });
});
