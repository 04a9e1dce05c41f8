/**
 * The three fence cases every finishing write must pass (seed: the claim fence): the owner's
 * write changes the row; a stale token or an expired lease changes nothing.
 */
import assert from 'node:assert/strict';
import type { ClaimRef } from '../../lib/db/driver.ts';
import type { ConformanceTarget, DefineCase, InspectedRow } from './driver-conformance.ts';

/** One fenced write under test. */
export interface FencedWrite {
  /** e.g. `outboxMarkSentMany`. */
  method: string;
  table: 'outbox' | 'inbox';
  /** Creates and claims one row; returns its claim. */
  claim(t: ConformanceTarget): Promise<ClaimRef>;
  /** Runs the write; returns true when the row changed. */
  write(t: ConformanceTarget, claim: ClaimRef): Promise<boolean>;
  /** Asserts the changed row. */
  check(row: InspectedRow, before: InspectedRow): void;
}

const STALE_TOKEN = '00000000-0000-4000-8000-000000000000';

export function defineFenceCases(define: DefineCase, w: FencedWrite): void {
  define(`${w.method} changes the row while the claim is held`, async (t) => {
    const claim = await w.claim(t);
    const before = (await t.row(w.table, claim.id))!;
    assert.equal(await w.write(t, claim), true);
    w.check((await t.row(w.table, claim.id))!, before);
  });

  define(`${w.method} with a stale token changes zero rows`, async (t) => {
    const claim = await w.claim(t);
    const before = await t.row(w.table, claim.id);
    assert.equal(await w.write(t, { id: claim.id, token: STALE_TOKEN }), false);
    assert.deepEqual(await t.row(w.table, claim.id), before);
  });

  define(`${w.method} after the lease expired changes zero rows`, async (t) => {
    const claim = await w.claim(t);
    await t.setTime(w.table, claim.id, 'lease_expires_at', -1000);
    const before = await t.row(w.table, claim.id);
    assert.equal(await w.write(t, claim), false);
    assert.deepEqual(await t.row(w.table, claim.id), before);
  });
}
