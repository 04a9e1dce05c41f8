/**
 * `**` matches every topic (docs/destinations.md: any text, dots included), and enqueue accepts any
 * non-empty topic: a topic holding a line break (\n, \r, U+2028, U+2029) is routed by `**` and
 * delivered, not dead with "no route matches", and replay by destination (PostgreSQL's `~` over
 * the same pattern source) selects it too.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { enqueue } from '../../lib/outbox/enqueue.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { compileTopicPattern, topicPatternSource } from '../../lib/outbox/routes.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

describe('a topic with a line break under a `**` route', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 10 },
    });
  });
  after(async () => db.drop());

  it('`**` matches every topic, in JavaScript as in PostgreSQL', async () => {
    for (const topic of ['a\nb', 'order.paid\r\n', 'x\u2028y', 'x\u2029y']) {
      const [row] = await db.query<{ m: boolean }>(`SELECT $1::text ~ $2 AS m`, [topic, topicPatternSource('**')]);
      assert.equal(row!.m, true, 'PostgreSQL matches');
      assert.equal(compileTopicPattern('**').test(topic), true, `router does not match ${JSON.stringify(topic)}`);
    }
  });

  it('an enqueued row whose topic holds a newline is delivered, not dead with "no route matches"', async () => {
    const client = await db.pool.connect();
    let id: string;
    try {
      await client.query('BEGIN');
      id = await enqueue(client as never, { topic: 'order.paid\n', payload: { n: 1 } }, { schema: db.schema });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const destination = new RecordingDestination();
    await runOutboxPass(passFixture(db, { destinations: [destination] }));
    const [row] = await inspectRows(db, [id]);
    assert.deepEqual([row!.state, row!.last_error], ['sent', null]);
    assert.deepEqual(destination.deliveries.map((d) => d.id), [id]);
  });
});
