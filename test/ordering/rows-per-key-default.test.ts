import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { LOST_LEASE_NOT_CHARGED } from '../../lib/db/postgres/outbox-queries.ts';
import type { Destination, EntryOutcome, OutboundMessage } from '../../lib/destinations/destination.ts';
import { enqueue } from '../../lib/index.ts';
import { runOutboxPass, type OutboxPassSummary } from '../../lib/outbox/outbox-pass.ts';
import type { OutboxPassDriver } from '../../lib/outbox/pass-context.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { claimRecordingDriver, insertOutboxRows, inspectRows, passFixture, withOutboxDatabase, withShortLeaseOutbox } from '../helpers/outbox-pass-fixture.ts';
import { pause } from '../helpers/recording-destination.ts';
import { createGate, delay, waitUntil } from '../helpers/wait.ts';

/**
 * An adversary of the PostgreSQL default `outbox.rowsPerKey` (unset: 10): a claim takes a key's
 * head and up to 9 rows after it under one token and lease, the pass publishes them in rounds,
 * releases the rest of a key at its first failure and lets go of the key's first row last.
 * Every suite here runs with the default configuration (`rowsPerKey` is never set) through
 * `runOutboxPass`, and checks, at the destination:
 *
 * - order: no row of a key is offered before every earlier row of its key was accepted (or
 *   failed for good: dead), across several passes at once, retries, thrown calls and dead heads;
 * - one holder: no key is in two destination calls at once, no call carries two rows of a key,
 *   no claim takes a key another claim holds, and the database never has two claim tokens of a
 *   key in flight (sampled);
 * - a stale worker whose lease ended mid-round: the reclaim charges one attempt to the key's
 *   first row, its later settle changes nothing (fenced by token), and duplicates are limited to
 *   rows it offered;
 * - a head that fails (retryable, permanent, dead at once, out of attempts, a call that threw):
 *   the followers go back unpublished with no attempt spent, and the key keeps its order after;
 * - a row committed late with a lower sequence while the key's rows are in flight, and a row
 *   delayed into the middle of a key's run: never claimed beside the run, published after it;
 * - claims grown towards `outbox.maxBatchSize` (default 1000) with followers: every row accepted
 *   exactly once, in order; at a deadline, no round is started that cannot end before it.
 */

/** FNV-1a of a string: deterministic choices per row. */
function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}

interface RowInfo {
  id: string;
  key: string | null;
  sequence: bigint;
  maxAttempts: number;
}

/**
 * What every destination of a test saw, in the order it happened: offers, accepted rows, rows
 * that failed for good, and the violations of key order and of one call per key.
 */
class Ledger {
  readonly rows = new Map<string, RowInfo>();
  readonly #byKey = new Map<string, RowInfo[]>();
  readonly accepted = new Map<string, number>();
  /** Rows answered with a failure that makes them dead (dead at once, or their last attempt). */
  readonly finalFailed = new Set<string>();
  /** Rows whose lower-sequence requirement is waived for others (committed late, on purpose). */
  readonly exempt = new Set<string>();
  readonly offers: Array<{ who: string; id: string; key: string | null; attempt: number; at: number }> = [];
  readonly orderViolations: string[] = [];
  readonly overlaps: string[] = [];
  readonly #keysInCall = new Map<string, string>();

  /** Reads every row of the table (id, key, sequence, max_attempts). */
  async load(db: TestDatabase): Promise<void> {
    const rows = await db.query<{ id: string; key: string | null; sequence: string; max_attempts: number }>(
      `SELECT id, key, sequence::text AS sequence, max_attempts FROM "${db.schema}".outbox ORDER BY sequence`,
    );
    this.#byKey.clear();
    for (const r of rows) {
      const info = { id: r.id, key: r.key === '' ? null : r.key, sequence: BigInt(r.sequence), maxAttempts: r.max_attempts };
      this.rows.set(r.id, info);
      if (info.key !== null) this.#byKey.set(info.key, [...(this.#byKey.get(info.key) ?? []), info]);
    }
  }

  offered(who: string, messages: OutboundMessage[]): void {
    const inThisCall = new Set<string>();
    for (const m of messages) {
      this.offers.push({ who, id: m.id, key: m.key, attempt: m.attempt, at: Date.now() });
      const row = this.rows.get(m.id);
      if (row === undefined) throw new Error(`row ${m.id} offered but not loaded into the ledger`);
      if (row.key === null) continue;
      if (inThisCall.has(row.key)) this.overlaps.push(`${who}: one call carries two rows of ${row.key}`);
      inThisCall.add(row.key);
      const other = this.#keysInCall.get(row.key);
      if (other !== undefined) this.overlaps.push(`${who}: ${row.key} offered (sequence ${row.sequence}) while ${other} has a call of it open`);
      this.#keysInCall.set(row.key, who);
      for (const earlier of this.#byKey.get(row.key) ?? []) {
        if (earlier.sequence >= row.sequence) break;
        if (this.exempt.has(earlier.id) || this.accepted.has(earlier.id) || this.finalFailed.has(earlier.id)) continue;
        this.orderViolations.push(`${who}: ${row.key} sequence ${row.sequence} offered before sequence ${earlier.sequence} was accepted`);
      }
    }
  }

  answered(messages: OutboundMessage[], outcomes: EntryOutcome[]): void {
    for (const [i, m] of messages.entries()) {
      const outcome = outcomes[i]!;
      if (outcome.status === 'sent') this.accepted.set(m.id, (this.accepted.get(m.id) ?? 0) + 1);
      else if (outcome.deadNow === true || m.attempt + 1 >= this.rows.get(m.id)!.maxAttempts) this.finalFailed.add(m.id);
    }
  }

  callEnded(messages: OutboundMessage[]): void {
    for (const m of messages) if (m.key !== null) this.#keysInCall.delete(m.key);
  }

  /** The payload `n` of each offer of `key`, in offer order. */
  offersOf(key: string, payloadOf: (id: string) => unknown): unknown[] {
    return this.offers.filter((o) => o.key === key).map((o) => payloadOf(o.id));
  }
}

type Answer = 'sent' | { status: 'retryable' | 'permanent'; error: string; deadNow?: boolean };

interface LedgerDestinationOptions {
  answer?: (m: OutboundMessage) => Answer;
  /** The call waits for this (not abortable: a frozen worker) when it returns a promise for any of its rows. */
  hold?: (m: OutboundMessage) => Promise<void> | undefined;
  /** Duration of each call (abortable). */
  delayMs?: number | (() => number);
  /** Throws for the whole call when this returns an error. */
  failCall?: (messages: OutboundMessage[]) => Error | undefined;
}

/** A destination `main` that writes what it sees into a shared ledger. */
class LedgerDestination implements Destination {
  readonly name = 'main';
  readonly type = 'sqs' as const;
  readonly maxBatchSize = 10;
  calls = 0;

  constructor(
    readonly ledger: Ledger,
    readonly who: string,
    readonly options: LedgerDestinationOptions = {},
  ) {}

  async publishBatch(messages: OutboundMessage[], signal?: AbortSignal): Promise<EntryOutcome[]> {
    this.calls++;
    this.ledger.offered(this.who, messages);
    try {
      const holds = messages.map((m) => this.options.hold?.(m)).filter((h) => h !== undefined);
      if (holds.length > 0) await Promise.all(holds);
      const ms = typeof this.options.delayMs === 'function' ? this.options.delayMs() : (this.options.delayMs ?? 0);
      if (await pause(ms, signal)) return messages.map((m): EntryOutcome => ({ id: m.id, status: 'retryable', error: 'aborted' }));
      const error = this.options.failCall?.(messages);
      if (error !== undefined) throw error;
      const outcomes = messages.map((m): EntryOutcome => {
        const answer = this.options.answer?.(m) ?? 'sent';
        return answer === 'sent' ? { id: m.id, status: 'sent' } : { id: m.id, ...answer };
      });
      this.ledger.answered(messages, outcomes);
      return outcomes;
    } finally {
      this.ledger.callEnded(messages);
    }
  }
}

/** What the claims of a test took: the largest limit, the most rows of one key, one token per key. */
class ClaimLog {
  maxLimit = 0;
  maxRowsOfKey = 0;
  /** Claims above `outbox.batchSize` (grown) that held several rows of some key. */
  grownWithFollowers = 0;
  claims = 0;
  readonly problems: string[] = [];

  wrap(driver: OutboxPassDriver, batchSize: number): OutboxPassDriver {
    return {
      ...driver,
      outboxClaimMany: async (p) => {
        const rows = await driver.outboxClaimMany(p);
        this.claims++;
        this.maxLimit = Math.max(this.maxLimit, p.limit);
        if (rows.length > p.limit) this.problems.push(`a claim of limit ${p.limit} returned ${rows.length} rows`);
        const byKey = new Map<string, typeof rows>();
        for (const row of rows) if (row.key !== null && row.key !== '') byKey.set(row.key, [...(byKey.get(row.key) ?? []), row]);
        let several = false;
        for (const [key, lane] of byKey) {
          this.maxRowsOfKey = Math.max(this.maxRowsOfKey, lane.length);
          if (lane.length > 1) several = true;
          if (new Set(lane.map((r) => r.claimToken)).size !== 1) this.problems.push(`${key}: one claim, several tokens`);
          if (lane.length > 10) this.problems.push(`${key}: ${lane.length} rows in one claim (default rowsPerKey is 10)`);
        }
        if (several && p.limit > batchSize) this.grownWithFollowers++;
        return rows;
      },
    };
  }
}

/**
 * Samples the table every few ms: a key with processing rows under two claim tokens, or with
 * more than one processing row marked `key_first`, is a violation.
 */
function sampleHolders(db: TestDatabase): { stop(): Promise<string[]>; samples(): number } {
  const violations: string[] = [];
  let samples = 0;
  let running = true;
  const client = new pg.Client({ connectionString: db.url });
  const loop = (async () => {
    await client.connect();
    while (running) {
      // (a sampler left running by a failed test ends with the schema)
      const rows = await client.query<{ key: string; tokens: number; firsts: number }>(
        `SELECT key, count(DISTINCT claim_token)::int AS tokens, count(*) FILTER (WHERE key_first)::int AS firsts
           FROM "${db.schema}".outbox WHERE state = 'processing' AND key <> '' GROUP BY key
         HAVING count(DISTINCT claim_token) > 1 OR count(*) FILTER (WHERE key_first) > 1`,
      );
      samples++;
      for (const r of rows.rows) violations.push(`${r.key}: ${r.tokens} tokens, ${r.firsts} first rows in flight`);
      await delay(3);
    }
  })()
    .catch((error: unknown) => {
      if (running) violations.push(`sampler failed: ${String(error)}`);
    })
    .finally(() => client.end().catch(() => {}));
  return {
    stop: async () => {
      running = false;
      await loop;
      return violations;
    },
    samples: () => samples,
  };
}

const OUTBOX = (db: TestDatabase) => `"${db.schema}".outbox`;

/** Rows not yet finished (pending or processing). */
async function unfinished(db: TestDatabase): Promise<number> {
  const [row] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${OUTBOX(db)} WHERE state IN ('pending', 'processing')`);
  return row!.n;
}

/** Payload `n` by row id, for readable assertions. */
async function payloadN(db: TestDatabase): Promise<(id: string) => unknown> {
  const rows = await db.query<{ id: string; n: unknown }>(`SELECT id, payload->'n' AS n FROM ${OUTBOX(db)}`);
  const byId = new Map(rows.map((r) => [r.id, r.n]));
  return (id) => byId.get(id);
}

const rowsOfKey = (key: string, n: number, from = 0) => Array.from({ length: n }, (_, i) => ({ topic: 't', key, payload: { n: from + i } }));

/**
 * Runs `passes` drain passes at once, again and again, until no row is pending or processing;
 * each pass on its own driver (kept across rounds: claims grow per driver) wrapped to record
 * claims and key holders.
 */
async function drainConcurrently(
  db: TestDatabase,
  destination: LedgerDestination,
  drivers: OutboxPassDriver[],
  outbox: Record<string, unknown> = {},
  timeoutMs = 120_000,
): Promise<OutboxPassSummary[]> {
  const summaries: OutboxPassSummary[] = [];
  const until = Date.now() + timeoutMs;
  while ((await unfinished(db)) > 0) {
    if (Date.now() > until) throw new Error(`not drained within ${timeoutMs} ms: ${await unfinished(db)} rows left`);
    summaries.push(...(await Promise.all(drivers.map((driver) => runOutboxPass(passFixture(db, { destinations: [destination], driver, outbox }))))));
    await delay(5);
  }
  return summaries;
}

/**
 * Seeds, in this order of `sequence`: `keys` keys interleaved (`k0`…, `perKey` rows each), then
 * `hotKeys` hot keys' backlogs interleaved (`hot` alone, or `hot0`…; `perHotKey` rows each), then
 * `keyless` keyless rows. Payload `{ g }` is the row's place in that order; every row may be
 * retried often (`max_attempts` 1000).
 */
async function seedKeysHotKeyless(db: TestDatabase, s: { keys: number; perKey: number; hotKeys: number; perHotKey: number; keyless: number }): Promise<void> {
  const keyed = s.keys * s.perKey;
  const hot = s.hotKeys * s.perHotKey;
  const hotKey = s.hotKeys === 1 ? `'hot'` : `'hot' || (g % ${s.hotKeys})`;
  await db.query(
    `INSERT INTO ${OUTBOX(db)} (topic, key, payload, max_attempts)
     SELECT 't', CASE WHEN g <= ${keyed} THEN 'k' || (g % ${s.keys}) WHEN g <= ${keyed + hot} THEN ${hotKey} ELSE NULL END,
            jsonb_build_object('g', g), 1000
       FROM generate_series(1, ${keyed + hot + s.keyless}) g ORDER BY g`,
  );
}

describe('outbox.rowsPerKey default (10): order and one holder per key under concurrent passes (PostgreSQL)', () => {
  let db!: TestDatabase;
  withOutboxDatabase((started) => (db = started));

  it('four passes at once, retries, thrown calls and dead rows: every key in sequence order, never two holders, every other row accepted once', async () => {
    assert.equal(db.config.outbox.rowsPerKey, undefined, 'the default configuration');
    const KEYS = 12;
    const PER_KEY = 40;
    const HOT = 300;
    const KEYLESS = 150;
    // Keys interleaved, then a hot key's backlog and keyless rows; every row may be retried often.
    await seedKeysHotKeyless(db, { keys: KEYS, perKey: PER_KEY, hotKeys: 1, perHotKey: HOT, keyless: KEYLESS });
    const ledger = new Ledger();
    await ledger.load(db);
    const deadIds = new Set(await db.query<{ id: string }>(`SELECT id FROM ${OUTBOX(db)} WHERE (payload->>'g')::int % 97 = 13`).then((rows) => rows.map((r) => r.id)));
    assert.ok(deadIds.size >= 9);
    const destination = new LedgerDestination(ledger, 'passes', {
      delayMs: () => Math.floor(Math.random() * 3),
      answer: (m) => {
        if (deadIds.has(m.id)) return { status: 'permanent', error: 'InvalidParameterValue', deadNow: true };
        if (m.attempt === 0 && hash(m.id) % 9 === 0) return { status: 'retryable', error: 'ThrottlingException' };
        return 'sent';
      },
      failCall: (messages) => (messages.some((m) => m.attempt === 0 && hash(m.id) % 53 === 7) ? new Error('socket hang up') : undefined),
    });
    const held = { ids: new Map<string, string>(), keys: new Map<string, string>(), violations: [] as string[] };
    const claims = new ClaimLog();
    const drivers = Array.from({ length: 4 }, (_, i) => claimRecordingDriver(claims.wrap(db.newDriver(), db.config.outbox.batchSize), `pass${i}`, held));
    const sampler = sampleHolders(db);
    const summaries = await drainConcurrently(db, destination, drivers, { retryBaseDelayMs: 1 });
    const holderViolations = await sampler.stop();

    assert.deepEqual(ledger.orderViolations, [], 'no row offered before an earlier row of its key was accepted');
    assert.deepEqual(ledger.overlaps, [], 'no key in two calls at once, no call with two rows of a key');
    assert.deepEqual(held.violations, [], 'no claim took a key another claim held');
    assert.deepEqual(claims.problems, []);
    assert.deepEqual(holderViolations, [], `the table never had two holders of a key (${sampler.samples()} samples)`);
    assert.equal(claims.maxRowsOfKey, 10, 'claims took up to 10 rows of a key, the default');
    const states = await db.query<{ id: string; state: string }>(`SELECT id, state FROM ${OUTBOX(db)}`);
    for (const { id, state } of states) {
      if (deadIds.has(id)) {
        assert.equal(state, 'dead', `${id}: dead at once`);
        assert.equal(ledger.accepted.get(id), undefined);
      } else {
        assert.equal(state, 'sent', `${id}: sent`);
        assert.equal(ledger.accepted.get(id), 1, `${id}: accepted exactly once`);
      }
    }
    const total = { released: 0, retried: 0, lost: 0, abandoned: 0 };
    for (const s of summaries) Object.assign(total, { released: total.released + s.released, retried: total.retried + s.retried, lost: total.lost + s.claimsLost, abandoned: total.abandoned + s.abandoned });
    assert.equal(total.lost, 0, 'no claim lost');
    assert.equal(total.abandoned, 0);
    assert.ok(total.released > 0 && total.retried > 0, `followers were released (${total.released}) after retried rows (${total.retried})`);
  });
});

describe('outbox.rowsPerKey default (10): a head that fails with followers in the claim (PostgreSQL)', () => {
  let db!: TestDatabase;
  withOutboxDatabase((started) => (db = started));

  it('retryable, permanent, dead at once and out of attempts: followers back unpublished, no attempt spent, and the key in order afterwards', async () => {
    const ids = await insertOutboxRows(db, ['H', 'P', 'D', 'X'].flatMap((key) => rowsOfKey(key, 12)));
    // X's head has one attempt: its retryable failure makes it dead.
    await db.query(`UPDATE ${OUTBOX(db)} SET max_attempts = 1 WHERE key = 'X' AND payload->>'n' = '0'`);
    const ledger = new Ledger();
    await ledger.load(db);
    const n = await payloadN(db);
    const destination = new LedgerDestination(ledger, 'pass', {
      answer: (m) => {
        if (m.payload.n !== 0 || m.attempt > 0) return 'sent';
        if (m.key === 'H' || m.key === 'X') return { status: 'retryable', error: 'ThrottlingException' };
        if (m.key === 'P') return { status: 'permanent', error: 'AccessDenied' };
        if (m.key === 'D') return { status: 'permanent', error: 'message too large', deadNow: true };
        return 'sent';
      },
    });
    const first = await runOutboxPass(passFixture(db, { destinations: [destination] }));
    assert.deepEqual(
      { claimed: first.claimed, sent: first.sent, retried: first.retried, dead: first.dead, released: first.released, claimsLost: first.claimsLost, abandoned: first.abandoned },
      { claimed: 62, sent: 22, retried: 2, dead: 2, released: 36, claimsLost: 0, abandoned: 0 },
      'each key claimed 10 rows; 9 followers of each head released; D and X moved on',
    );
    const byKey = async (key: string) => (await inspectRows(db, ids)).filter((r) => r.key === key);
    for (const key of ['H', 'P']) {
      const [head, ...rest] = await byKey(key);
      assert.deepEqual([head!.state, head!.attempt], ['pending', 1], `${key}: the head is a retry`);
      assert.ok(head!.dueInMs > 0, `${key}: the retry waits for its backoff`);
      assert.ok(
        rest.every((r) => r.state === 'pending' && r.attempt === 0 && r.last_error === null),
        `${key}: the followers are back, unpublished, no attempt spent`,
      );
      assert.deepEqual(ledger.offersOf(key, n), [0], `${key}: only the head was offered`);
    }
    for (const key of ['D', 'X']) {
      const [head, ...rest] = await byKey(key);
      assert.equal(head!.state, 'dead', `${key}: the head is dead`);
      assert.ok(rest.every((r) => r.state === 'sent' && r.attempt === 0), `${key}: the rest went on, no attempt spent`);
      assert.deepEqual(ledger.offersOf(key, n), Array.from({ length: 12 }, (_, i) => i), `${key}: the head, then the rest in order`);
    }
    assert.match((await byKey('X'))[0]!.last_error ?? '', /gave up after 1 of 1 attempts/);

    await waitUntil('the retried heads are due', async () => (await inspectRows(db, ids)).every((r) => r.dueInMs <= 0), 10_000);
    const second = await runOutboxPass(passFixture(db, { destinations: [destination] }));
    assert.equal(second.sent, 24);
    for (const key of ['H', 'P']) {
      assert.deepEqual(ledger.offersOf(key, n), [0, ...Array.from({ length: 12 }, (_, i) => i)], `${key}: the head twice, then the rest in order`);
      assert.deepEqual((await byKey(key)).map((r) => [r.state, r.attempt]), Array.from({ length: 12 }, (_, i) => ['sent', i === 0 ? 1 : 0]));
    }
    assert.deepEqual(ledger.orderViolations, []);
    assert.deepEqual(ledger.overlaps, []);
  });

  it('a call that threw with two keys\' heads in it: both keys release their followers, and keep their order', async () => {
    const ids = await insertOutboxRows(db, ['T', 'U'].flatMap((key) => rowsOfKey(key, 12)));
    const ledger = new Ledger();
    await ledger.load(db);
    const n = await payloadN(db);
    const destination = new LedgerDestination(ledger, 'pass', {
      failCall: (messages) => (messages.some((m) => m.key === 'T' && m.payload.n === 0 && m.attempt === 0) ? new Error('connect ETIMEDOUT') : undefined),
    });
    const first = await runOutboxPass(passFixture(db, { destinations: [destination] }));
    assert.deepEqual([first.claimed, first.retried, first.released, first.sent], [20, 2, 18, 0]);
    assert.deepEqual((await inspectRows(db, ids)).map((r) => [r.state, r.attempt]), ids.map((_, i) => ['pending', i % 12 === 0 ? 1 : 0]), 'the heads retried, every other row back unpublished');
    await waitUntil('the retried heads are due', async () => (await inspectRows(db, ids)).every((r) => r.dueInMs <= 0));
    await runOutboxPass(passFixture(db, { destinations: [destination] }));
    for (const key of ['T', 'U']) assert.deepEqual(ledger.offersOf(key, n), [0, ...Array.from({ length: 12 }, (_, i) => i)], key);
    assert.deepEqual((await inspectRows(db, ids)).map((r) => [r.state, r.attempt]), ids.map((_, i) => ['sent', i % 12 === 0 ? 1 : 0]));
    assert.deepEqual(ledger.orderViolations, []);
    assert.deepEqual(ledger.overlaps, []);
  });
});

describe('outbox.rowsPerKey default (10): rows of a key that arrive in the middle of a run (PostgreSQL)', () => {
  let db!: TestDatabase;
  withOutboxDatabase((started) => (db = started));

  for (const where of ['before the head', 'between the claimed rows'] as const) {
    it(`a row committed late ${where}, while the key's rows are in a call: no other pass claims it, and it comes after the run`, async () => {
      const ledger = new Ledger();
      const late = await db.pool.connect();
      let lateId: string;
      let before: string[] = [];
      try {
        await late.query('BEGIN');
        if (where === 'between the claimed rows') before = await insertOutboxRows(db, rowsOfKey('K', 2));
        lateId = await enqueue(late, { topic: 't', key: 'K', payload: { n: 'late' } }, { schema: db.schema });
        await insertOutboxRows(db, rowsOfKey('K', 12, before.length));
        await ledger.load(db);
        const visible = await payloadN(db);
        const gate = createGate();
        const destinationA = new LedgerDestination(ledger, 'A', { hold: (m) => (m.key === 'K' && m.payload.n === 4 ? gate.wait() : undefined) });
        const passA = runOutboxPass(passFixture(db, { destinations: [destinationA], driver: db.newDriver() }));
        await waitUntil('A has K/4 in a call', () => ledger.offers.some((o) => o.who === 'A' && visible(o.id) === 4));
        await late.query('COMMIT');
        await ledger.load(db);
        ledger.exempt.add(lateId);
        // Another pass now: the late row is the lowest of its key, but the key is held.
        const claims = new ClaimLog();
        const destinationB = new LedgerDestination(ledger, 'B');
        const passB = await runOutboxPass(passFixture(db, { destinations: [destinationB], driver: claims.wrap(db.newDriver(), db.config.outbox.batchSize) }));
        assert.equal(passB.claimed, 0, 'the key has a holder: nothing of it is claimed');
        assert.equal(destinationB.calls, 0);
        const inFlight = await db.query<{ n: unknown; key_first: boolean }>(`SELECT payload->'n' AS n, key_first FROM ${OUTBOX(db)} WHERE state = 'processing' ORDER BY sequence`);
        assert.deepEqual(
          inFlight.map((r) => r.n),
          Array.from({ length: 10 }, (_, i) => i),
          'the claim holds the head and 9 rows after it; the late row is not among them',
        );
        assert.deepEqual(inFlight.map((r) => r.key_first), inFlight.map((_, i) => i === 0), 'one first row');
        gate.open();
        assert.ok((await passA).sent >= 10);
        await runOutboxPass(passFixture(db, { destinations: [destinationB], driver: db.newDriver() }));
        const n = await payloadN(db);
        const accepted = ledger.offers.filter((o) => ledger.accepted.has(o.id)).map((o) => n(o.id));
        assert.deepEqual(accepted, [...Array.from({ length: 10 }, (_, i) => i), 'late', 10, 11, ...(where === 'before the head' ? [] : [12, 13])], 'the run, then the late row, then the rest');
        assert.deepEqual(ledger.orderViolations, []);
        assert.deepEqual(ledger.overlaps, []);
        assert.ok([...ledger.accepted.values()].every((c) => c === 1));
        assert.equal(await unfinished(db), 0);
      } finally {
        await late.query('ROLLBACK').catch(() => {});
        late.release();
      }
    });
  }

  it('a row delayed into the middle of a key: the claim stops before it, nothing after it moves until it is due, then the rest in order', async () => {
    const ids = await insertOutboxRows(db, [
      ...rowsOfKey('K', 3),
      { topic: 't', key: 'K', payload: { n: 3 }, delayMs: 1500 },
      ...rowsOfKey('K', 6, 4),
      ...rowsOfKey('L', 3),
    ]);
    const ledger = new Ledger();
    await ledger.load(db);
    const n = await payloadN(db);
    const destination = new LedgerDestination(ledger, 'pass');
    const claims = new ClaimLog();
    const first = await runOutboxPass(passFixture(db, { destinations: [destination], driver: claims.wrap(db.driver, db.config.outbox.batchSize) }));
    assert.equal(first.claimed, 6, 'K 0–2 and L 0–2: the run of K stops at its delayed row');
    assert.deepEqual(ledger.offersOf('K', n), [0, 1, 2]);
    const rest = (await inspectRows(db, ids)).filter((r) => r.key === 'K').slice(3);
    assert.ok(rest.every((r) => r.state === 'pending' && r.attempt === 0 && r.claim_token === null), 'the delayed row and the rows after it were never claimed');
    assert.ok(rest[0]!.dueInMs > 0, 'the delayed row keeps its schedule');
    // Before it is due, another pass takes nothing of K.
    assert.equal((await runOutboxPass(passFixture(db, { destinations: [destination], driver: db.newDriver() }))).claimed, 0);
    await waitUntil('the delayed row is due', async () => (await inspectRows(db, [ids[3]!]))[0]!.dueInMs <= 0);
    const second = await runOutboxPass(passFixture(db, { destinations: [destination], driver: claims.wrap(db.newDriver(), db.config.outbox.batchSize) }));
    assert.equal(second.sent, 7);
    assert.equal(second.batches, 1, 'the delayed row heads one claim with the 6 rows after it');
    assert.deepEqual(ledger.offersOf('K', n), Array.from({ length: 10 }, (_, i) => i));
    assert.deepEqual(ledger.orderViolations, []);
    assert.deepEqual(ledger.overlaps, []);
  });

  it('a delayed row that becomes due while the rows before it are in a call is not claimed beside them', async () => {
    const ids = await insertOutboxRows(db, [...rowsOfKey('K', 3), { topic: 't', key: 'K', payload: { n: 3 }, delayMs: 300 }, ...rowsOfKey('K', 3, 4)]);
    const ledger = new Ledger();
    await ledger.load(db);
    const n = await payloadN(db);
    const gate = createGate();
    const passA = runOutboxPass(passFixture(db, { destinations: [new LedgerDestination(ledger, 'A', { hold: (m) => (m.payload.n === 1 ? gate.wait() : undefined) })], driver: db.newDriver() }));
    await waitUntil('A holds K/1 in a call', () => ledger.offers.some((o) => n(o.id) === 1));
    await waitUntil('the delayed row is due', async () => (await inspectRows(db, [ids[3]!]))[0]!.dueInMs <= 0);
    const passB = await runOutboxPass(passFixture(db, { destinations: [new LedgerDestination(ledger, 'B')], driver: db.newDriver() }));
    assert.equal(passB.claimed, 0, 'K is held: its due row waits');
    gate.open();
    assert.ok((await passA).sent >= 3);
    await runOutboxPass(passFixture(db, { destinations: [new LedgerDestination(ledger, 'C')], driver: db.newDriver() }));
    assert.deepEqual(ledger.offersOf('K', n), Array.from({ length: 7 }, (_, i) => i));
    assert.deepEqual(ledger.orderViolations, []);
    assert.deepEqual(ledger.overlaps, []);
  });
});

describe('outbox.rowsPerKey default (10): a stale worker whose lease ended mid-round (PostgreSQL, 1.2 s leases)', () => {
  let db!: TestDatabase;
  withShortLeaseOutbox((started) => (db = started));

  it('the reclaim racing its round charges the key one attempt, a new claim holds the key alone, and the stale settle changes nothing', async () => {
    const ids = await insertOutboxRows(db, [...rowsOfKey('K', 12), ...rowsOfKey('L', 3)]);
    const ledger = new Ledger();
    await ledger.load(db);
    const n = await payloadN(db);
    const thaw = createGate();
    const staleDriver = db.newDriver();
    // A frozen container: its call of K/2 answers when thawed, and its renewal reaches the
    // database only then (and finds the rows under another claim).
    const frozen: OutboxPassDriver = { ...staleDriver, outboxRenewMany: (p) => thaw.wait().then(() => staleDriver.outboxRenewMany(p)) };
    const destinationA = new LedgerDestination(ledger, 'A', { hold: (m) => (m.key === 'K' && m.payload.n === 2 ? thaw.wait() : undefined) });
    const sampler = sampleHolders(db);
    const staleFixture = passFixture(db, { destinations: [destinationA], driver: frozen });
    const stalePass = runOutboxPass(staleFixture);
    await waitUntil('A has K/2 in a call', () => ledger.offers.some((o) => o.who === 'A' && n(o.id) === 2 && o.key === 'K'));
    const staleToken = (await db.query<{ claim_token: string }>(`SELECT claim_token FROM ${OUTBOX(db)} WHERE id = $1`, [ids[0]]))[0]!.claim_token;
    await waitUntil('A\'s lease ended', async () => (await db.query(`SELECT 1 FROM ${OUTBOX(db)} WHERE claim_token = $1 AND lease_expires_at <= clock_timestamp()`, [staleToken])).length > 0, 5000);

    // B reclaims (the gate cleared) and claims the key again; its calls of K wait.
    await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
    const releaseB = createGate();
    const destinationB = new LedgerDestination(ledger, 'B', { hold: (m) => (m.key === 'K' ? releaseB.wait() : undefined) });
    const ownerPass = runOutboxPass(passFixture(db, { destinations: [destinationB], driver: db.newDriver(), outbox: { claimTimeoutMs: 30_000 } }));
    await waitUntil('B has K/0 in a call', () => ledger.offers.some((o) => o.who === 'B' && o.key === 'K'));
    const view = async () =>
      db.query<{ n: unknown; state: string; claim_token: string | null; attempt: number; last_error: string | null; key_first: boolean }>(
        `SELECT payload->'n' AS n, state, claim_token, attempt, last_error, key_first FROM ${OUTBOX(db)} WHERE key = 'K' ORDER BY sequence`,
      );
    const owned = await view();
    const ownerToken = owned[0]!.claim_token;
    assert.ok(ownerToken !== null && ownerToken !== staleToken);
    assert.deepEqual(
      owned.map((r) => [r.n, r.state, r.claim_token === ownerToken, r.attempt, r.key_first]),
      Array.from({ length: 12 }, (_, i) => (i < 10 ? [i, 'processing', true, i === 0 ? 1 : 0, i === 0] : [i, 'pending', false, 0, true])),
      'one new claim of K/0–9, its first row charged the lost lease',
    );
    assert.match(owned[0]!.last_error ?? '', /lease expired during delivery attempt 1 of 5/);
    assert.ok(owned.slice(1, 10).every((r) => r.last_error === LOST_LEASE_NOT_CHARGED), 'the followers say why they were not charged');

    const thawedAt = Date.now();
    thaw.open();
    const stale = await stalePass;
    assert.deepEqual(
      { sent: stale.sent, retried: stale.retried, dead: stale.dead, released: stale.released, lost: stale.claimsLost, abandoned: stale.abandoned },
      { sent: 0, retried: 0, dead: 0, released: 0, lost: stale.claimed, abandoned: 0 },
      'every claim of the stale pass is lost, and counted so',
    );
    const afterStale = await view();
    assert.deepEqual(afterStale, owned, 'the stale settle changed nothing');
    const staleOffersAfterThaw = ledger.offers.filter((o) => o.who === 'A' && o.at >= thawedAt).map((o) => `${o.key}/${String(n(o.id))}`);

    releaseB.open();
    const owner = await ownerPass;
    assert.equal(owner.reclaimed, 13, 'K/0–9 and L/0–2 came back from the stale claim');
    assert.equal(owner.sent, 15, 'the new owner sent every row: K/0–9, L/0–2 again, then K/10–11');
    const holderViolations = await sampler.stop();
    assert.deepEqual(holderViolations, [], 'never two claims of a key in the table');
    assert.deepEqual((await inspectRows(db, ids)).map((r) => r.state), ids.map(() => 'sent'));
    assert.deepEqual(ledger.orderViolations, [], 'no row offered before the rows before it were accepted, by either worker');
    const staleOffered = new Set(ledger.offers.filter((o) => o.who === 'A').map((o) => o.id));
    for (const [id, count] of ledger.accepted) {
      if (count > 1) assert.ok(staleOffered.has(id), `${String(n(id))}: delivered twice only if the stale worker offered it`);
    }
    assert.equal(ledger.accepted.get(ids[10]!), 1);
    assert.equal(ledger.accepted.get(ids[11]!), 1);
    // Overlaps come from the stale worker only (its open call).
    assert.ok(ledger.overlaps.every((o) => o.startsWith('A:') || / while A /.test(o)), ledger.overlaps.join('; '));
    // Thawed, the stale worker confirms its claim before it offers K's next row (the renewal it
    // sent before the freeze answers that the claim is lost): it offers nothing more.
    assert.deepEqual(staleOffersAfterThaw, [], 'the stale worker offered no row after the thaw');
  });
});

describe('outbox.rowsPerKey default (10) with claims growing to outbox.maxBatchSize (PostgreSQL)', () => {
  let db!: TestDatabase;
  withOutboxDatabase((started) => (db = started));

  it('two passes on a large backlog: claims grow past batchSize with followers, every row accepted exactly once, in order', async () => {
    assert.equal(db.config.outbox.maxBatchSize, 1000);
    const KEYS = 300;
    const PER_KEY = 12;
    const HOT = 150;
    const KEYLESS = 300;
    await seedKeysHotKeyless(db, { keys: KEYS, perKey: PER_KEY, hotKeys: 3, perHotKey: HOT, keyless: KEYLESS });
    const ledger = new Ledger();
    await ledger.load(db);
    const destination = new LedgerDestination(ledger, 'passes', {
      delayMs: 1,
      answer: (m) => (m.attempt === 0 && hash(m.id) % 20 === 0 ? { status: 'retryable', error: 'ThrottlingException' } : 'sent'),
    });
    const held = { ids: new Map<string, string>(), keys: new Map<string, string>(), violations: [] as string[] };
    const claims = new ClaimLog();
    const drivers = Array.from({ length: 2 }, (_, i) => claimRecordingDriver(claims.wrap(db.newDriver(), db.config.outbox.batchSize), `pass${i}`, held));
    const summaries = await drainConcurrently(db, destination, drivers, { retryBaseDelayMs: 1 });
    assert.ok(claims.maxLimit >= 400, `claims grew (largest limit ${claims.maxLimit})`);
    assert.ok(claims.grownWithFollowers > 0, 'grown claims held several rows of a key');
    assert.deepEqual(claims.problems, []);
    assert.deepEqual(held.violations, []);
    assert.deepEqual(ledger.orderViolations, []);
    assert.deepEqual(ledger.overlaps, []);
    assert.equal(ledger.accepted.size, ledger.rows.size, 'every row accepted');
    assert.ok([...ledger.accepted.values()].every((c) => c === 1), 'no row accepted twice');
    assert.equal(summaries.reduce((t, s) => t + s.claimsLost + s.abandoned, 0), 0);
  });

  it('at its deadline a pass starts no round of a key that cannot end before it: no call left open, no attempt charged, nothing lost', async () => {
    const ids = await insertOutboxRows(db, rowsOfKey('K', 40));
    const ledger = new Ledger();
    await ledger.load(db);
    const n = await payloadN(db);
    // Calls of 250 ms: a claim of 10 rows of K needs 2.5 s of rounds; the claim window is 1 s. The
    // deadline is 4 s in, the invocation ends 1 s later (time for the settle to land).
    const destination = new LedgerDestination(ledger, 'pass', { delayMs: 250 });
    const summary = await runOutboxPass(passFixture(db, { destinations: [destination], mode: 'deadline', timeoutMs: 5000, marginMs: 1000 }));
    const rows = await inspectRows(db, ids);
    assert.deepEqual(
      { abandoned: summary.abandoned, claimsLost: summary.claimsLost, processing: rows.filter((r) => r.state === 'processing').length },
      { abandoned: 0, claimsLost: 0, processing: 0 },
      `the pass left no call open at its deadline (offered K/${ledger.offersOf('K', n).join(',')})`,
    );
    assert.equal(summary.claimed, summary.sent + summary.released);
    assert.ok(rows.every((r) => r.attempt === 0), 'no attempt spent');
    assert.ok(summary.sent >= 10, `the pass published a run (${summary.sent})`);
    assert.deepEqual(ledger.orderViolations, []);
  });
});
