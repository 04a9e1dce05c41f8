import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { enqueue } from '../../lib/index.ts';
import type { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { outboxClaimPaths } from '../helpers/claim-paths.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const KEYS = 100;
const ROWS_PER_KEY = 12;
const KEYLESS = 100;
const LATE_KEYS = ['k0', 'k1', 'k2', 'k3', 'k4'];
/**
 * One hot key with a long backlog, inserted after the rest: it guarantees claims with room for
 * followers (with `outbox.rowsPerKey` above 1). Were its rows only ever claimed one per claim, each
 * of its at least `HOT_ROWS` claims would have been full (`LIMIT` rows), 3,000 claimed rows in
 * all, about twice what the drain claims (every row once, plus its retries and walk-aways).
 */
const HOT_ROWS = 150;
const LIMIT = 20;
/**
 * The rows' `max_attempts`: the claimers retry and walk away (a reclaim) at random, and a row whose
 * lease is lost on its last attempt goes `dead` by design — not a violation, but not what this
 * test is about, so no row runs out of attempts here.
 */
const MAX_ATTEMPTS = 1000;

/** A deterministic stream of numbers in [0, 1) per claimer, so a failing run can be replayed. */
function random(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return x / 2147483648;
  };
}

/**
 * Four claimers drain a 100-key backlog at once, with retries (the head goes back to `pending`
 * and holds its key), reclaims (a claimer walks away, its lease runs out, the reclaim step returns
 * the row) and rows of five keys whose lower sequences commit late, after later rows of their key
 * were claimed, and one hot key's long backlog last. Every claim is checked against what the
 * others hold; every key's deliveries are checked against `sequence` order at the end.
 */
const CLAIM_PATHS = [...outboxClaimPaths(20), ...outboxClaimPaths(20, 4)];

for (const { path, overrides, functions } of CLAIM_PATHS) describe(`four outbox claimers on a 100-key backlog (${path}, outbox.rowsPerKey ${overrides.outbox.rowsPerKey})`, () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase(overrides);
  });
  after(async () => db.drop());

  it('never hold two rows of a key, and deliver every key in sequence order (late rows after their key was drained past them)', async () => {
    const table = `"${db.schema}".outbox`;
    // The late rows take their sequence first and commit only once the drain is running.
    const late: pg.Client[] = [];
    const lateIds = new Set<string>();
    for (const key of LATE_KEYS) {
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      await client.query('BEGIN');
      lateIds.add(await enqueue(client, { topic: 't', key, payload: { late: true } }, { schema: db.schema, maxAttempts: MAX_ATTEMPTS }));
      late.push(client);
    }
    await db.pool.query(
      `INSERT INTO ${table} (topic, key, payload, max_attempts)
       SELECT 't', CASE WHEN g <= ${KEYLESS} THEN NULL WHEN g > ${KEYS * ROWS_PER_KEY + KEYLESS} THEN 'hot' ELSE 'k' || (g % ${KEYS}) END,
              jsonb_build_object('g', g), ${MAX_ATTEMPTS}
         FROM generate_series(1, ${KEYS * ROWS_PER_KEY + KEYLESS + HOT_ROWS}) g ORDER BY g`,
    );
    const total = KEYS * ROWS_PER_KEY + KEYLESS + HOT_ROWS + LATE_KEYS.length;

    const held = new Map<string, string>(); // key -> token of the claim that holds it
    const violations: string[] = [];
    const sentOnce = new Map<string, number>();
    const deliveries = new Map<string, Array<{ id: string; sequence: bigint }>>(); // key -> rows in the order they were sent
    let sent = 0;
    let retries = 0;
    let reclaims = 0;
    let severalRows = 0; // claims of a key that took more than its head
    const stopAt = Date.now() + 60_000;

    const claimer = async (driver: PostgresDriver, seed: number) => {
      const next = random(seed);
      while (sent < total && Date.now() < stopAt) {
        await driver.outboxReclaimExpired({ throttleMs: 0 }).then((r) => (reclaims += r.reclaimed));
        const rows = await driver.outboxClaimMany({ limit: LIMIT, leaseMs: 30_000 });
        if (rows.length === 0) {
          await new Promise((resolve) => setTimeout(resolve, 2));
          continue;
        }
        // The rows of each key in the claim (one lane per key; a keyless row alone), in claim order.
        const lanes = new Map<string, typeof rows>();
        for (const row of rows) {
          const lane = row.key === null ? row.id : row.key;
          lanes.set(lane, [...(lanes.get(lane) ?? []), row]);
        }
        for (const [key, lane] of lanes) {
          if (lane.length > 1) severalRows++;
          if (lane[0]!.key === null) continue;
          const holder = held.get(key);
          if (holder !== undefined) violations.push(`${key}: claimed ${lane[0]!.id} while ${holder} holds the key`);
          held.set(key, lane[0]!.claimToken);
          for (let i = 1; i < lane.length; i++) {
            if (lane[i]!.claimToken !== lane[0]!.claimToken) violations.push(`${key}: one claim, two tokens`);
            if (BigInt(lane[i]!.sequence) <= BigInt(lane[i - 1]!.sequence)) violations.push(`${key}: the claim's rows are not in sequence order`);
          }
        }
        // As the pass does: a key's rows one after another; at its first row not sent, the rest
        // of the key goes back unpublished, first, then the retry, then the sent rows.
        const toSend = [];
        const release = [];
        const retry = [];
        for (const lane of lanes.values()) {
          for (const [i, row] of lane.entries()) {
            const roll = next();
            if (roll < 0.1) {
              retry.push({ id: row.id, token: row.claimToken, delayMs: 0, error: 'throttled' });
              retries++;
            } else if (roll < 0.14) {
              // walk away: the lease runs out and the reclaim step returns the rows. The key is
              // let go of first, as before a retry: the lease ends when the update commits, and a
              // reclaim and a claim by another claimer can be answered before this update is.
              if (row.key !== null) held.delete(row.key);
              await db.pool.query(`UPDATE ${table} SET lease_expires_at = clock_timestamp() - interval '1 millisecond' WHERE id = ANY($1) AND claim_token = $2`, [
                lane.slice(i).map((r) => r.id),
                row.claimToken,
              ]);
              break;
            } else {
              toSend.push(row);
              continue;
            }
            release.push(...lane.slice(i + 1).map((r) => ({ id: r.id, token: r.claimToken })));
            break;
          }
          if (lane[0]!.key !== null && toSend.at(-1) !== lane.at(-1)) held.delete(lane[0]!.key);
        }
        // The key is released before the writes that let go of it, as a publisher's settle does;
        // a claim of a row of the key can only follow the committed writes.
        if (release.length > 0) assert.equal((await driver.outboxReleaseMany({ claims: release })).length, release.length, 'no released claim was lost');
        if (retry.length > 0) assert.equal((await driver.outboxRetryMany({ items: retry })).length, retry.length, 'no retried claim was lost');
        if (toSend.length > 0) {
          // Delivered now, before the sent mark, as a publisher delivers: the next row of a key is
          // claimed only once this mark has committed. The order the marks' answers come back in
          // is not the order they committed in: on a loaded machine a server process can commit
          // (the next claim of the key then sees it) and be held up before it answers, while
          // another claimer claims the next row, marks it and hears back first.
          for (const row of toSend) {
            if (row.key !== null) held.delete(row.key);
            sentOnce.set(row.id, (sentOnce.get(row.id) ?? 0) + 1);
            if (row.key !== null) deliveries.set(row.key, [...(deliveries.get(row.key) ?? []), { id: row.id, sequence: BigInt(row.sequence) }]);
          }
          const marked = await driver.outboxMarkSentMany({ claims: toSend.map((r) => ({ id: r.id, token: r.claimToken })) });
          assert.equal(marked.length, toSend.length, 'no claim was lost');
          sent += toSend.length;
        }
      }
    };

    const drivers = Array.from({ length: 4 }, () => db.newDriver());
    const drain = Promise.all(drivers.map((d, i) => claimer(d, i + 1)));
    await new Promise((resolve) => setTimeout(resolve, 150));
    for (const client of late) {
      await client.query('COMMIT');
      await client.end();
    }
    await drain;

    assert.deepEqual(violations, [], 'a claim never took a key another claimer held');
    const unsent = await db.query(`SELECT key, sequence, state, attempt, last_error FROM ${table} WHERE state <> 'sent' ORDER BY sequence LIMIT 5`);
    assert.equal(sent, total, `every row sent (${sent} of ${total}; not sent: ${JSON.stringify(unsent)})`);
    assert.ok([...sentOnce.values()].every((n) => n === 1), 'each row sent once');
    const [{ n: twice }] = (await db.query<{ n: string }>(`SELECT count(*) AS n FROM ${table} WHERE state <> 'sent'`)) as [{ n: string }];
    assert.equal(Number(twice), 0);
    assert.ok(retries > 0 && reclaims > 0, `retries (${retries}) and reclaims (${reclaims}) happened`);
    if (overrides.outbox.rowsPerKey > 1) assert.ok(severalRows > 0, 'claims took several rows of a key');
    else assert.equal(severalRows, 0, 'each claim took the head of a key only');
    for (const driver of drivers) assert.equal(driver.ctx.claimFunctions?.missing.size, functions ? 0 : undefined, `every claim went through ${path}`);
    for (const [key, rows] of deliveries) {
      const inOrder = rows.filter((r) => !lateIds.has(r.id));
      for (let i = 1; i < inOrder.length; i++) assert.ok(inOrder[i - 1]!.sequence < inOrder[i]!.sequence, `${key}: sent in sequence order`);
      assert.equal(inOrder.length, key === 'hot' ? HOT_ROWS : ROWS_PER_KEY, `${key}: every row delivered`);
    }
  });
});
