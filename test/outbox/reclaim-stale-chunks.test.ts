/**
 * Reclaims on statistics that do not know the expired rows (autovacuum off, never analyzed), as
 * reclaim-stale-stats.test.ts, at a chunk's worth of rows and more. The chunks' joins were planned
 * from estimates of one row: an anti join compared every pair of a chunk's rows, the UPDATE's
 * probes sorted the chunk's ids again each, and the charge's probe scanned the lease index: one
 * chunk of 10,000 took 14-22 s, past a pass's deadline, so the relay reclaimed and forwarded
 * nothing, and the outbox reclaimed nothing, pass after pass. Results only, no timing: the pass has
 * 20 s, and a chunk now takes a fraction of a second.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { insertExpiredOutboxClaims, insertExpiredPushRows, relayPassOf, staleStatistics } from '../helpers/expired-claims.ts';
import { passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

describe('expired leases on stale statistics, a chunk\'s worth and more', () => {
  let db: TestDatabase;
  withOutboxDatabase((d) => (db = d));

  it('relay: one pass of 20 s reclaims 10,000 expired push rows and forwards them', { timeout: 120_000 }, async () => {
    await db.query(`DELETE FROM "${db.schema}".inbox`);
    await staleStatistics(db, 'inbox');
    await insertExpiredPushRows(db, 10000);
    const summary = await relayPassOf(db, 20_000);
    assert.deepEqual([summary.reclaimed, summary.forwarded], [10000, 10000]);
  });

  it('outbox: one pass of 20 s reclaims 2,000 expired claims of 10 keyed rows each and sends them', { timeout: 120_000 }, async () => {
    await staleStatistics(db, 'outbox');
    await insertExpiredOutboxClaims(db, 2000, 10);
    const summary = await runOutboxPass(passFixture(db, { destinations: [new RecordingDestination()], mode: 'drain', timeoutMs: 20_000 }));
    assert.deepEqual([summary.reclaimRan, summary.reclaimed], [true, 20000]);
  });
});
