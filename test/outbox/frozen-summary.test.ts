import assert from 'node:assert/strict';
import type pg from 'pg';
import { describe, it } from 'node:test';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, passFixture, stateCounts, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { delay, waitUntil } from '../helpers/wait.ts';

/**
 * A pass's summary says what its writes did in the database, also when the container was frozen
 * mid-pass and resumed past its deadline: a settle already sent lands whatever the pass does, so
 * the pass waits for its answer instead of counting its rows abandoned.
 */
describe('outbox pass: the summary of a pass frozen past its deadline', () => {
  let db!: TestDatabase;
  withOutboxDatabase((created) => (db = created));

  it('counts the rows its settle marked sent after the freeze, and none abandoned', { timeout: 60_000 }, async () => {
    const ids = await insertOutboxRows(db, Array.from({ length: 5 }, (_, i) => ({ topic: 'orders.paid', key: `k${i}`, payload: { i } })));
    // The invocation's clock: `frozenMs` jumps forward as a container resumed after a freeze sees it.
    let frozenMs = 0;
    const context = createInvocationContext({ timeoutMs: 30_000, now: () => Date.now() + frozenMs });
    // The settle is slowed by a row lock this test holds (changing nothing), taken before the
    // destination answers; the row's lease (30 s, on the database clock) stays valid.
    let holder: pg.PoolClient | undefined;
    const destination = new RecordingDestination({
      maxBatchSize: 10,
      waitFor: async () => {
        holder = await db.pool.connect();
        await holder.query('BEGIN');
        await holder.query(`SELECT id FROM "${db.schema}".outbox WHERE id = ANY($1) FOR UPDATE`, [ids]);
      },
    });
    const stop = new AbortController();
    const options = passFixture(db, { destinations: [destination], context, signal: stop.signal });
    const pass = runOutboxPass(options);
    await waitUntil('the settle waits on the row lock', async () => {
      const rows = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%UPDATE "${db.schema}".%' AND query LIKE '%state = ''sent''%'`,
      );
      return rows[0]!.n === 1;
    });
    // Frozen until past the invocation's end, then resumed: the pass is told to stop.
    frozenMs = 60_000;
    stop.abort();
    // The lock holder ends a moment later; the settle then lands.
    await delay(200);
    await holder!.query('COMMIT');
    holder!.release();
    const summary = await pass;
    // Whatever the pass left running (nothing, or a settle's COMMIT) has ended before the count.
    await waitUntil('no statement of the pass is under way', async () => {
      const rows = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND state <> 'idle' AND query LIKE '%"${db.schema}".%'`,
      );
      return rows[0]!.n === 0;
    });
    const counts = await stateCounts(db);
    assert.deepEqual({ sent: summary.sent, abandoned: summary.abandoned, claimsLost: summary.claimsLost }, { sent: counts.sent ?? 0, abandoned: counts.processing ?? 0, claimsLost: 0 }, 'the summary says what the database did');
    assert.deepEqual(counts, { sent: 5 }, 'the settle landed');
  });
});
