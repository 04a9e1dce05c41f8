import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { claimRecordingDriver, insertOutboxRows, passFixture, stateCounts } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { delay } from '../helpers/wait.ts';

describe('outbox pass: several pollers at once', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], batchSize: 8, concurrency: 3, pollIntervalMs: 5 },
    });
  });
  after(async () => db.drop());

  it('never hold one row (or two rows of one key) at once, deliver every row once, and keep per-key sequence order', async () => {
    const keys = Array.from({ length: 10 }, (_, k) => `order-${k}`);
    // Interleaved: keyed rows of every key, then a keyless row, so claims mix keys and keyless rows.
    // All due a moment from now: the pollers start their passes on an empty backlog (their
    // connections made, their claim functions verified), and the rows come due for all at once, so
    // the first poller to connect cannot take the whole table before the others claim.
    const messages = [];
    for (let seq = 0; seq < 20; seq++) {
      for (const key of keys) messages.push({ topic: 'orders.updated', key, payload: { key, seq }, delayMs: 400 });
      messages.push({ topic: 'audit.logged', payload: { seq }, delayMs: 400 }, { topic: 'audit.logged', payload: { seq }, delayMs: 400 });
    }
    const ids = await insertOutboxRows(db, messages);
    const destination = new RecordingDestination({ delayMs: () => 1 + Math.floor(Math.random() * 4) });
    const held = { ids: new Map<string, string>(), keys: new Map<string, string>(), violations: [] as string[] };

    // Each poller runs passes one after another, as its schedule would, until the table is drained:
    // a pass in `drain` mode returns when its first claim finds nothing, which happens when another
    // poller's claims hold every head that can move while this one's claim waits on them.
    const runPasses = async (name: string) => {
      const driver = claimRecordingDriver(db.newDriver(), name, held);
      const done: Array<Awaited<ReturnType<typeof runOutboxPass>>> = [];
      for (let pass = 0; pass < 400; pass++) {
        done.push(await runOutboxPass(passFixture(db, { destinations: [destination], driver, mode: 'drain' })));
        const open = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE state IN ('pending', 'processing')`);
        if (open[0]!.n === 0) break;
        await delay(5);
      }
      return { sent: done.reduce((sum, s) => sum + s.sent, 0), passes: done.length };
    };
    const summaries = await Promise.all(['p1', 'p2', 'p3', 'p4'].map(runPasses));

    assert.deepEqual(held.violations, []);
    assert.deepEqual(destination.overlaps, [], 'no row and no key was in two destination calls at once');
    const unfinished = await db.query(
      `SELECT key, sequence, state, attempt, last_error, round(extract(epoch FROM scheduled_at - clock_timestamp()) * 1000) AS due_in_ms
         FROM "${db.schema}".outbox WHERE state <> 'sent' ORDER BY sequence`,
    );
    assert.deepEqual(await stateCounts(db), { sent: ids.length }, `unfinished rows: ${JSON.stringify(unfinished)}; passes: ${JSON.stringify(summaries)}`);
    const counts = destination.deliveryCounts();
    assert.equal(counts.size, ids.length, 'every row delivered');
    assert.ok([...counts.values()].every((n) => n === 1), 'each exactly once');
    assert.equal(summaries.reduce((sum, s) => sum + s.sent, 0), ids.length);
    assert.ok(summaries.filter((s) => s.sent > 0).length >= 2, `the work was shared: ${summaries.map((s) => s.sent).join(', ')}`);
    for (const key of keys) {
      const seqs = destination.deliveries.filter((d) => d.key === key).map((d) => d.payload.seq);
      assert.deepEqual(seqs, Array.from({ length: 20 }, (_, i) => i), `key ${key} delivered in sequence order`);
    }
  });
});
