/**
 * Retention never deletes a row a replay is moving back to `pending` (docs/operations.md: "`pending`
 * and `processing` rows are never deleted"). The DELETE picks its rows with `FOR UPDATE SKIP
 * LOCKED` and tests the state again on the row it deletes: a row another transaction holds — here
 * a replay waiting to move it — is left alone, and retention does not wait for it. Before, the
 * DELETE queued behind the replay and, once the replay committed, deleted the row it had just
 * moved to `pending` (PostgreSQL re-checked the row against the subquery's stale answer).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import { runRetention } from '../../lib/operations/retention.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { waitUntil } from '../helpers/wait.ts';

describe('retention beside a concurrent replay', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ retention: { enabled: true, batchSize: 10 } });
  });
  beforeEach(async () => {
    await db.query(`DELETE FROM "${db.schema}".outbox`);
    await db.query(`DELETE FROM "${db.schema}".inbox`);
  });
  after(async () => {
    await db.drop();
  });

  /** Statements of this file's schema waiting for a lock, whose text starts with `verb`. */
  const waiting = async (verb: string) =>
    (
      await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database() AND position($1 in query) > 0 AND ltrim(query) ILIKE $2`,
        [db.schema, `${verb}%`],
      )
    )[0]!.n;

  /** `work` must finish within `ms` (it would otherwise be waiting for a lock the test holds). */
  const within = async <T>(ms: number, what: string, work: Promise<T>): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([work, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms)))]);
    } finally {
      clearTimeout(timer);
    }
  };

  for (const table of ['outbox', 'inbox'] as const) {
    it(`an old dead ${table} row a replay is moving to pending is neither deleted nor waited for`, async () => {
      const id = randomUUID();
      const other = randomUUID();
      const insert = (rowId: string) =>
        table === 'outbox'
          ? db.query(
              `INSERT INTO "${db.schema}".outbox (id, topic, payload, state, created_at, updated_at, scheduled_at, last_error)
               VALUES ($1, 'order.paid', '{}', 'dead', now() - interval '2000 hours', now() - interval '2000 hours', now() - interval '2000 hours', 'boom')`,
              [rowId],
            )
          : db.query(
              `INSERT INTO "${db.schema}".inbox (id, source, idempotency_key, payload, state, created_at, last_error)
               VALUES ($1, 'src', $2, '{}', 'dead', now() - interval '2000 hours', 'boom')`,
              [rowId, randomUUID()],
            );
      await insert(id);
      await insert(other);
      // Another session holds the row, so the replay waits with it in hand, as a long replay would.
      const holder = await db.pool.connect();
      await holder.query('BEGIN');
      await holder.query(`SELECT id FROM "${db.schema}".${table} WHERE id = $1 FOR UPDATE`, [id]);
      const replay = table === 'outbox' ? db.driver.outboxReplay({ ids: [id], states: ['dead'] }) : db.driver.inboxReplay({ ids: [id] });
      try {
        await waitUntil('the replay waits for the row', async () => (await waiting('UPDATE')) === 1);
        const result = await within(10_000, 'retention', runRetention({ driver: db.newDriver(), config: db.config }));
        assert.equal(result.deleted[table], 1, 'the row nobody holds is deleted, the held one is left for a later run');
      } finally {
        await holder.query('COMMIT');
        holder.release();
      }
      assert.equal(await replay, 1, 'the replay moved the row to pending');
      const rows = await db.query<{ id: string; state: string }>(`SELECT id, state FROM "${db.schema}".${table} ORDER BY id`);
      assert.deepEqual(rows, [{ id, state: 'pending' }], 'the replayed row is pending, the other one deleted');
    });
  }
});
