/**
 * A retry or a release (back to `pending`) that committed but whose answer was lost (its
 * connection reset after the commit: a failover, a proxy restart) is sent again on another
 * connection of the pool. The write keeps the claim's token on the pending row, so the write sent
 * again recognises the row its first run wrote and leaves it as written: the pass counts the row as
 * retried, not as a lost claim (before: `queuebox_claims_lost_total` and the lost-claims alarm),
 * and the attempt is charged once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { poolLosingFirstAnswer } from '../helpers/lost-answer.ts';
import { insertOutboxRows, inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

const backToPending = (text: string | undefined) => text !== undefined && /SET state = 'pending',/.test(text);
const isRetry = (text: string | undefined) => backToPending(text) && text!.includes('attempt = t.attempt + 1');
const isRelease = (text: string | undefined) => backToPending(text) && !text!.includes('attempt = t.attempt + 1');

describe('a retry or release whose answer was lost after it committed', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 10 },
      inbox: { sources: { shop: { type: 'http', path: '/shop', auth: { type: 'none' } } } },
    });
  });
  after(async () => db.drop());

  it('outbox pass: the retry sent again counts the row as retried, charged one attempt, not as a lost claim', async () => {
    const ids = await insertOutboxRows(db, [
      { topic: 'orders', payload: { n: 1 } },
      { topic: 'orders', payload: { n: 2 } },
    ]);
    const { pool, cuts } = poolLosingFirstAnswer(db.config.database, db.url, isRetry);
    const driver = new PostgresDriver({ config: db.config, url: db.url, pool });
    try {
      const destination = new RecordingDestination({ answer: (m) => (m.payload.n === 2 ? { status: 'retryable', error: 'Throttled' } : 'sent') });
      const summary = await runOutboxPass(passFixture(db, { destinations: [destination], driver, outbox: { retryBaseDelayMs: 60_000 }, timeoutMs: 20_000 }));
      assert.equal(cuts(), 1, 'the retry committed and its answer was lost');
      assert.deepEqual([summary.sent, summary.retried, summary.claimsLost], [1, 1, 0]);
      const rows = await inspectRows(db, ids);
      assert.deepEqual(
        rows.map((r) => [r.state, r.attempt]),
        [
          ['sent', 0],
          ['pending', 1],
        ],
        'the attempt is charged once, not again by the write sent again',
      );
      assert.match(rows[1]!.last_error!, /Throttled/);
      assert.ok(rows[1]!.dueInMs > 40_000, 'the backoff of the first run stands');
    } finally {
      await driver.close();
      await pool.end();
    }
  });

  it('outbox release and inbox retry: the write sent again answers the row; a row claimed again since is not taken for it', async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    const [id] = await insertOutboxRows(db, [{ topic: 'orders', payload: { n: 1 } }]);
    const released = poolLosingFirstAnswer(db.config.database, db.url, isRelease);
    const driver = new PostgresDriver({ config: db.config, url: db.url, pool: released.pool });
    let claim: Awaited<ReturnType<PostgresDriver['outboxClaimMany']>>[number] | undefined;
    try {
      [claim] = await driver.outboxClaimMany({ limit: 1, leaseMs: 30_000 });
      assert.deepEqual(await driver.outboxReleaseMany({ claims: [{ id: claim!.id, token: claim!.claimToken }] }), [id]);
      assert.equal(released.cuts(), 1);
      const [row] = await inspectRows(db, [id!]);
      assert.deepEqual([row!.state, row!.attempt], ['pending', 0]);
      // Claimed again by another claim and released by it: the row is pending under the new token.
      const [again] = await driver.outboxClaimMany({ limit: 1, leaseMs: 30_000 });
      assert.equal(again!.id, id);
      await driver.outboxReleaseMany({ claims: [{ id: again!.id, token: again!.claimToken }] });
    } finally {
      await driver.close();
      await released.pool.end();
    }
    // The first claim's retry, its answer lost too, is sent again (the text that also matches a
    // pending row): the row is pending under another token, so neither run changes it.
    const stale = poolLosingFirstAnswer(db.config.database, db.url, isRetry);
    const staleDriver = new PostgresDriver({ config: db.config, url: db.url, pool: stale.pool });
    try {
      assert.deepEqual(await staleDriver.outboxRetryMany({ items: [{ id: id!, token: claim!.claimToken, delayMs: 0, error: 'late' }] }), [], 'the first claim is over');
      assert.equal(stale.cuts(), 1, 'the retry was sent again');
      const [row] = await inspectRows(db, [id!]);
      assert.deepEqual([row!.state, row!.attempt, row!.last_error], ['pending', 0, null]);
    } finally {
      await staleDriver.close();
      await stale.pool.end();
    }

    const { id: inboxId } = await db.driver.inboxInsert({ source: 'shop', idempotencyKey: 'k1', aggregateId: 'A', eventType: 'created', payload: {}, consumption: 'push' });
    const retried = poolLosingFirstAnswer(db.config.database, db.url, isRetry);
    const relayDriver = new PostgresDriver({ config: db.config, url: db.url, pool: retried.pool });
    try {
      const [claimed] = await relayDriver.inboxClaimPushMany({ limit: 1, leaseMs: 30_000 });
      assert.equal(claimed!.id, inboxId);
      assert.deepEqual(await relayDriver.inboxRetryMany({ items: [{ id: inboxId, token: claimed!.claimToken, delayMs: 60_000, error: 'outbox full' }] }), [inboxId]);
      assert.equal(retried.cuts(), 1);
      const [row] = await db.query<{ state: string; attempt: number }>(`SELECT state, attempt FROM "${db.schema}".inbox WHERE id = $1`, [inboxId]);
      assert.deepEqual([row!.state, row!.attempt], ['pending', 1]);
    } finally {
      await relayDriver.close();
      await retried.pool.end();
    }
  });
});
