/**
 * The independent checker: reads what the destination accepted, what the tables hold and what
 * the audit trail saw, and lists every broken promise. It never trusts a pass's own summary;
 * the counters are compared with what it counted itself.
 *
 * Accounting rules (see docs/reliability.md):
 * - no loss: every outbox row is `sent` and was delivered at least once, or `dead` with a reason;
 *   every push inbox row is `processed` or `dead` with a reason; every pull row likewise.
 * - order: per outbox key, the first deliveries of the rows that ended `sent` follow `sequence`;
 *   per inbox aggregate, the relayed outbox rows follow receive order, and the pull handlers'
 *   committed effects follow receive order.
 * - duplicates: an outbox row returns to `pending` only by a fenced retry (after a delivery that
 *   failed, so nothing was accepted) or by the reclaim step. Hence deliveries(R) ≤ 1 + reclaims(R):
 *   every duplicate delivery of R needs a reclaim of R (a lost claim of R always ends in one). A
 *   reclaim counts the lost lease as an attempt (`attempt + 1`) or, when it was the row's last,
 *   makes the row `dead` (no delivery follows); a row after the first of its key in an expired
 *   claim (`outbox.rowsPerKey`) goes back to `pending` with its attempt unchanged. All are told
 *   apart by their `last_error`.
 * - fence: every finishing write from `processing` happened under a live lease, every `sent` a
 *   pass was told about changed the row under the token that pass held, and no row became `sent`
 *   twice.
 * - counters: `queuebox_outbox_messages_reclaimed_total` equals the audited reclaims (or is below
 *   them when a reclaim's answer never reached its pass: killed, connection cut);
 *   `queuebox_claims_lost_total` lies between the fenced settle writes that changed nothing and
 *   that plus the renewals that changed nothing or failed; lost claims ≤ reclaims (to pending or dead).
 * - inbox exactly once: one outbox row per `processed` push row, none for a dead one; one effect
 *   row per `processed` pull row, none for a dead one.
 */
import type pg from 'pg';
import { readAuditTrail } from './audit-trail.ts';
import type { FaultDelivery } from './fault-destination.ts';
import type { Ledger } from './invocation-faults.ts';

export interface CounterTotals {
  outboxClaimsLost: number;
  outboxReclaimed: number;
  inboxClaimsLost: number;
  pullClaimsLost: number;
}

export interface CheckInput {
  pool: pg.Pool;
  schema: string;
  deliveries: readonly FaultDelivery[];
  ledger: Ledger;
  counters: CounterTotals;
}

export interface CheckReport {
  /** Violations by kind, each with up to 5 examples. */
  violations: Map<string, { count: number; examples: string[] }>;
  violationCount: number;
  stats: {
    outboxRows: number;
    pushRows: number;
    pullRows: number;
    sent: number;
    dead: number;
    deliveries: number;
    duplicateDeliveries: number;
    rowsDuplicated: number;
    reclaimsAudited: number;
    claims: number;
  };
}

export async function checkRun(input: CheckInput): Promise<CheckReport> {
  const { pool, schema, deliveries, ledger, counters } = input;
  const violations = new Map<string, { count: number; examples: string[] }>();
  const fail = (kind: string, example: string) => {
    const v = violations.get(kind) ?? { count: 0, examples: [] };
    v.count++;
    if (v.examples.length < 5) v.examples.push(example);
    violations.set(kind, v);
  };
  const s = `"${schema}"`;
  const outbox = (
    await pool.query<{ id: string; key: string | null; sequence: string; state: string; last_error: string | null; inbox_id: string | null }>(
      `SELECT id, key, sequence::text AS sequence, state, last_error, headers->>'x-inbox-id' AS inbox_id FROM ${s}.outbox`,
    )
  ).rows;
  const inbox = (
    await pool.query<{ id: string; consumption: string; aggregate_id: string | null; sequence: string; state: string; last_error: string | null }>(
      `SELECT id, consumption, aggregate_id, sequence::text AS sequence, state, last_error FROM ${s}.inbox`,
    )
  ).rows;
  const effects = (await pool.query<{ n: string; inbox_id: string }>(`SELECT e.n::text AS n, e.inbox_id FROM ${s}.faults_effects e ORDER BY e.n`)).rows;
  const audit = await readAuditTrail(pool, schema);

  // ---- outbox: loss, duplicates, order ----
  const delivered = new Map<string, { count: number; first: number }>();
  for (const d of deliveries) {
    const e = delivered.get(d.id);
    if (e) e.count++;
    else delivered.set(d.id, { count: 1, first: d.n });
  }
  const reclaims = new Map<string, number>();
  const sentAudits = new Map<string, string[]>();
  let claims = 0;
  let reclaimsAudited = 0;
  let leaseDeadAudited = 0;
  for (const a of audit) {
    if (a.old_state === 'pending' && a.new_state === 'processing') claims++;
    if (a.old_state !== 'processing') {
      if (a.new_state !== 'processing') fail('fence: finishing write on a row not processing', `${a.row_id} ${a.old_state}→${a.new_state}`);
      continue;
    }
    // The reclaim step: back to pending with the lost lease counted (attempt + 1), or not counted
    // (a row after the first of its key in the claim), or dead when that was the row's last
    // attempt (a dead row is never delivered again).
    if (a.lease_lost && a.new_state === 'pending' && (a.new_attempt === a.old_attempt + 1 || a.new_attempt === a.old_attempt)) {
      reclaimsAudited++;
      reclaims.set(a.row_id, (reclaims.get(a.row_id) ?? 0) + 1);
      continue;
    }
    if (a.lease_lost && a.new_state === 'dead' && a.new_attempt === a.old_attempt) {
      leaseDeadAudited++;
      continue;
    }
    if (!a.lease_live) fail('fence: finishing write under an expired lease', `${a.row_id} ${a.old_state}→${a.new_state}`);
    if (a.new_state === 'sent') {
      const tokens = sentAudits.get(a.row_id) ?? [];
      tokens.push(a.old_token ?? '');
      sentAudits.set(a.row_id, tokens);
      if (tokens.length > 1) fail('fence: row marked sent twice', a.row_id);
    }
  }
  for (const r of ledger.sentReports) {
    if (!(sentAudits.get(r.id) ?? []).includes(r.token)) fail('fence: a stale token marked a row sent', `${r.id} token ${r.token}`);
  }
  let duplicateDeliveries = 0;
  let rowsDuplicated = 0;
  let sent = 0;
  let dead = 0;
  const byKey = new Map<string, Array<{ sequence: bigint; first: number; id: string }>>();
  for (const row of outbox) {
    const d = delivered.get(row.id);
    if (row.state === 'sent') {
      sent++;
      if (!d) fail('loss: outbox row sent but never delivered', row.id);
      else if (row.key !== null) {
        const list = byKey.get(row.key) ?? [];
        list.push({ sequence: BigInt(row.sequence), first: d.first, id: row.id });
        byKey.set(row.key, list);
      }
    } else if (row.state === 'dead') {
      dead++;
      if (!row.last_error) fail('loss: outbox row dead without a reason', row.id);
    } else {
      fail(`loss: outbox row left ${row.state}`, row.id);
    }
    if (d && d.count > 1) {
      duplicateDeliveries += d.count - 1;
      rowsDuplicated++;
      const r = reclaims.get(row.id) ?? 0;
      if (d.count - 1 > r) fail('duplicate not accounted: more extra deliveries than reclaims', `${row.id}: ${d.count} deliveries, ${r} reclaims`);
    }
  }
  for (const [key, list] of byKey) {
    list.sort((a, b) => (a.sequence < b.sequence ? -1 : 1));
    for (let i = 1; i < list.length; i++) {
      if (list[i]!.first < list[i - 1]!.first) fail('order: key delivered out of sequence', `key ${key}: ${list[i]!.id} before ${list[i - 1]!.id}`);
    }
  }

  // ---- counters ----
  if (ledger.reclaimCalls.outbox === ledger.reclaimReported.outbox) {
    if (counters.outboxReclaimed !== reclaimsAudited) fail('counter: reclaimed_total differs from audited reclaims', `${counters.outboxReclaimed} vs ${reclaimsAudited}`);
  } else if (counters.outboxReclaimed > reclaimsAudited) {
    fail('counter: reclaimed_total above audited reclaims', `${counters.outboxReclaimed} vs ${reclaimsAudited}`);
  }
  const lostLow = ledger.settleLost.outbox;
  const lostHigh = lostLow + ledger.renewMissing.outbox + ledger.renewFailed.outbox;
  if (counters.outboxClaimsLost < lostLow || counters.outboxClaimsLost > lostHigh) {
    fail('counter: claims_lost_total{outbox} outside what the checker saw', `${counters.outboxClaimsLost} not in [${lostLow}, ${lostHigh}]`);
  }
  if (counters.outboxClaimsLost > reclaimsAudited + leaseDeadAudited) fail('counter: more lost claims than reclaims', `${counters.outboxClaimsLost} > ${reclaimsAudited + leaseDeadAudited}`);
  const inLow = ledger.settleLost.inbox;
  const inHigh = inLow + ledger.renewMissing.inbox + ledger.renewFailed.inbox;
  if (counters.inboxClaimsLost < inLow || counters.inboxClaimsLost > inHigh) {
    fail('counter: claims_lost_total{inbox} outside what the checker saw', `${counters.inboxClaimsLost} not in [${inLow}, ${inHigh}]`);
  }

  // ---- inbox: relay exactly once and order; pull exactly once and order ----
  const outboxByInbox = new Map<string, Array<{ sequence: bigint }>>();
  for (const row of outbox) {
    if (row.inbox_id === null) continue;
    const list = outboxByInbox.get(row.inbox_id) ?? [];
    list.push({ sequence: BigInt(row.sequence) });
    outboxByInbox.set(row.inbox_id, list);
  }
  const effectsByInbox = new Map<string, number[]>();
  effects.forEach((e, i) => {
    const list = effectsByInbox.get(e.inbox_id) ?? [];
    list.push(i);
    effectsByInbox.set(e.inbox_id, list);
  });
  const pushAgg = new Map<string, Array<{ sequence: bigint; outboxSequence: bigint; id: string }>>();
  const pullAgg = new Map<string, Array<{ sequence: bigint; effect: number; id: string }>>();
  let pushRows = 0;
  let pullRows = 0;
  for (const row of inbox) {
    const finished = row.state === 'processed' || (row.state === 'dead' && !!row.last_error);
    if (!finished) fail(`loss: ${row.consumption} inbox row left ${row.state}${row.state === 'dead' ? ' without a reason' : ''}`, row.id);
    if (row.consumption === 'push') {
      pushRows++;
      const forwarded = outboxByInbox.get(row.id) ?? [];
      const expected = row.state === 'processed' ? 1 : 0;
      if (forwarded.length !== expected) fail('inbox exactly once: outbox rows per push row', `${row.id} (${row.state}): ${forwarded.length} outbox rows`);
      if (row.aggregate_id !== null && forwarded.length === 1) {
        const list = pushAgg.get(row.aggregate_id) ?? [];
        list.push({ sequence: BigInt(row.sequence), outboxSequence: forwarded[0]!.sequence, id: row.id });
        pushAgg.set(row.aggregate_id, list);
      }
    } else {
      pullRows++;
      const done = effectsByInbox.get(row.id) ?? [];
      const expected = row.state === 'processed' ? 1 : 0;
      if (done.length !== expected) fail('pull exactly once: committed effects per pull row', `${row.id} (${row.state}): ${done.length} effects`);
      if (row.aggregate_id !== null && done.length === 1) {
        const list = pullAgg.get(row.aggregate_id) ?? [];
        list.push({ sequence: BigInt(row.sequence), effect: done[0]!, id: row.id });
        pullAgg.set(row.aggregate_id, list);
      }
    }
  }
  for (const [agg, list] of pushAgg) {
    list.sort((a, b) => (a.sequence < b.sequence ? -1 : 1));
    for (let i = 1; i < list.length; i++) {
      if (list[i]!.outboxSequence < list[i - 1]!.outboxSequence) fail('order: relay forwarded an aggregate out of receive order', `${agg}: ${list[i]!.id}`);
    }
  }
  for (const [agg, list] of pullAgg) {
    list.sort((a, b) => (a.sequence < b.sequence ? -1 : 1));
    for (let i = 1; i < list.length; i++) {
      if (list[i]!.effect < list[i - 1]!.effect) {
        fail('order: pull handled an aggregate out of receive order', `${agg}: ${list[i]!.id} (sequence ${list[i]!.sequence}, effect #${list[i]!.effect}) before ${list[i - 1]!.id} (sequence ${list[i - 1]!.sequence}, effect #${list[i - 1]!.effect})`);
      }
    }
  }

  let violationCount = 0;
  for (const v of violations.values()) violationCount += v.count;
  return {
    violations,
    violationCount,
    stats: { outboxRows: outbox.length, pushRows, pullRows, sent, dead, deliveries: deliveries.length, duplicateDeliveries, rowsDuplicated, reclaimsAudited, claims },
  };
}
