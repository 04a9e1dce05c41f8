import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { outboxClaimBound, outboxClaimStatements } from '../../lib/db/postgres/outbox-queries.ts';
import { OLDEST_WINDOW } from '../../lib/db/postgres/claim-text.ts';
import { CLAIM_FUNCTION_SETTINGS, type ClaimStatement } from '../../lib/db/postgres/claim-functions.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const LEASE = 60_000;

/**
 * A test database for the enclosing `describe`, created before its tests and dropped after them,
 * whose outbox is emptied before each test; the accessor returns it once the tests run.
 */
function emptyOutboxEachTest(): () => TestDatabase {
  let db: TestDatabase | undefined;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db!.drop());
  beforeEach(async () => {
    await db!.query(`TRUNCATE "${db!.schema}".outbox`);
  });
  return () => db!;
}

/**
 * Shared buffers of one run of `statement` (the lease, every other parameter NULL), read by
 * `EXPLAIN (ANALYZE, BUFFERS)` in a rolled-back transaction — with the claim functions' plan
 * settings when `functionSettings` — and the rows it answered. Run twice: the first execution
 * warms the caches; the second is counted.
 *
 * `heapReads`: index-only scans off, so every index probe reads its heap rows. An index-only
 * scan reads the heap only where the visibility map does not vouch for the page, and VACUUM
 * cannot set it for rows newer than the oldest transaction of any other session (other test
 * files running meanwhile): the same claim then read up to twice the buffers from one run to the
 * next. With heap reads the count depends on the rows read alone.
 */
async function claimBuffers(db: TestDatabase, statement: ClaimStatement, functionSettings: boolean, heapReads = false): Promise<{ buffers: number; claimed: number }> {
  const params = [LEASE, ...statement.params.slice(1).map(() => null)];
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    if (functionSettings) for (const setting of CLAIM_FUNCTION_SETTINGS) await client.query(`SET LOCAL ${setting.replace('=', ' = ')}`);
    if (heapReads) await client.query('SET LOCAL enable_indexonlyscan = off');
    let plan = '';
    for (let i = 0; i < 2; i++) {
      await client.query('SAVEPOINT s');
      const { rows } = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${statement.text}`, params);
      plan = JSON.stringify(rows[0]!['QUERY PLAN']);
      await client.query('ROLLBACK TO SAVEPOINT s');
    }
    const top = (JSON.parse(plan) as Array<{ Plan: Record<string, number> }>)[0]!.Plan;
    return { buffers: top['Shared Hit Blocks']! + top['Shared Read Blocks']!, claimed: top['Actual Rows']! };
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

/**
 * The outbox claim takes first attempts in `scheduled_at, sequence` order whatever holds a key:
 * a keyless row is never passed by a later first attempt, and a key that can move is reached
 * within `outboxClaimBound` claims, however long the backlog of a key in flight and however
 * many new keys keep arriving.
 */
describe('outbox claim: keyless rows and cold keys are not starved by a hot key or a stream of new keys (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  const table = () => `"${db.schema}".outbox`;
  const insert = async (rows: Array<string | null>) => {
    const values = rows.map((_, i) => `($${i + 1}::varchar)`).join(', ');
    // One statement per call: the rows get increasing sequences in array order.
    await db.query(`INSERT INTO ${table()} (topic, key, payload) SELECT 't', k, '{}' FROM (VALUES ${values}) v(k)`, rows);
  };

  // rowsPerKey 1: heads only; 10: the pass's default on PostgreSQL (`outbox.rowsPerKey`), heads and their followers.
  for (const rowsPerKey of [1, 10]) it(`a hot key with its head in flight and a long backlog, keyless rows and cold keys behind it, six new keys before every claim of four (rowsPerKey ${rowsPerKey})`, async (t) => {
    const LIMIT = 4;
    await db.query(`TRUNCATE ${table()}`);
    const driver = db.newDriver();
    // Hot key h: 40 rows; its head goes in flight and stays there (a slow destination).
    await insert(Array.from({ length: 40 }, () => 'h'));
    const [hot] = await driver.outboxClaimMany({ limit: 1, leaseMs: LEASE, rowsPerKey });
    assert.equal(hot?.key, 'h');
    await insert(['cold-1', null, 'cold-2', null, null, 'cold-3', null]);
    const watched = await db.query<{ sequence: string; key: string | null }>(
      `SELECT sequence, key FROM ${table()} WHERE key IS NULL OR key LIKE 'cold-%' ORDER BY sequence`,
    );
    let newKey = 0;
    const claimedIn = new Map<string, number>(); // sequence → claim number
    await insert(Array.from({ length: 6 }, () => `new-${newKey++}`));
    // Due rows when the watched rows can move (they all can from the start): h's 39 waiting rows, the 7, the first 6 new keys.
    const queued = Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM ${table()} WHERE state = 'pending'`))[0]!.n);
    const bound = outboxClaimBound(queued, LIMIT);
    for (let claim = 1; claim <= bound && claimedIn.size < watched.length + 100; claim++) {
      const rows = await driver.outboxClaimMany({ limit: LIMIT, leaseMs: LEASE, rowsPerKey });
      for (const r of rows) claimedIn.set(r.sequence, claim);
      const done = rows.filter((r) => r.key !== 'h');
      await driver.outboxMarkSentMany({ claims: done.map((r) => ({ id: r.id, token: r.claimToken })) });
      await insert(Array.from({ length: 6 }, () => `new-${newKey++}`));
      if (watched.every((w) => claimedIn.has(w.sequence))) break;
    }
    t.diagnostic(`bound ${bound} claims at ${queued} due rows; claimed in claims ${watched.map((w) => claimedIn.get(w.sequence) ?? '-').join(', ')}`);
    const missing = watched.filter((w) => !claimedIn.has(w.sequence)).map((w) => `${w.key ?? 'keyless'}#${w.sequence}`);
    assert.deepEqual(missing, [], `every keyless row and cold key is claimed within ${bound} claims (${queued} rows were due)`);
    // No first attempt after a keyless row (in claim order) is claimed before it.
    for (const w of watched.filter((x) => x.key === null)) {
      const passedBy = [...claimedIn].filter(([sequence, claim]) => BigInt(sequence) > BigInt(w.sequence) && claim < claimedIn.get(w.sequence)!);
      assert.deepEqual(passedBy, [], `keyless row ${w.sequence} (claim ${claimedIn.get(w.sequence)}) passed by later rows`);
    }
    await driver.close();
  });

  /**
   * Claims of `limit` with `rowsPerKey` until every row of `rows` but those of key `g` is claimed,
   * `g`'s first row held in flight throughout (another pass's, as above): `rows` are inserted in
   * one statement (one `scheduled_at`, `sequence` in list order), and a claim's rows are settled
   * one claim later (their keys stay in flight meanwhile). Answers each row's claim number by
   * sequence, and the rows' sequences and keys.
   */
  const claimAllBut = async (rows: Array<string | null>, limit: number, rowsPerKey: number) => {
    await db.query(`TRUNCATE ${table()}`);
    await insert(rows);
    const all = await db.query<{ sequence: string; key: string | null }>(`SELECT sequence, key FROM ${table()} ORDER BY sequence`);
    await db.query(
      `UPDATE ${table()} SET state = 'processing', claim_token = gen_random_uuid(), key_first = true, lease_expires_at = now() + interval '1 hour'
        WHERE sequence = (SELECT min(sequence) FROM ${table()} WHERE key = 'g')`,
    );
    const driver = db.newDriver();
    const claimedIn = new Map<string, number>();
    const wanted = all.filter((r) => r.key !== 'g').length;
    let settle: Array<{ id: string; token: string }> = [];
    for (let claim = 1; claim <= 200 && claimedIn.size < wanted; claim++) {
      const claimed = await driver.outboxClaimMany({ limit, leaseMs: LEASE, rowsPerKey });
      for (const r of claimed) claimedIn.set(r.sequence, claim);
      await driver.outboxMarkSentMany({ claims: settle });
      settle = claimed.filter((r) => r.key !== 'g').map((r) => ({ id: r.id, token: r.claimToken }));
    }
    await driver.close();
    return { claimedIn, all, wanted };
  };

  /** The rows claimed before keyless row `w` although they come after it (`scheduled_at` is the same: by sequence). */
  const passing = (claimedIn: Map<string, number>, w: { sequence: string }) =>
    [...claimedIn].filter(([sequence, claim]) => BigInt(sequence) > BigInt(w.sequence) && claim < claimedIn.get(w.sequence)!).map(([sequence, claim]) => `#${sequence} in claim ${claim}`);

  it('a keyless row past a window held by a key in flight is not passed by the later rows of a key whose head is in the window (rowsPerKey 10)', async (t) => {
    // h's head, then 21 rows of g (its head in flight: the window of a claim of 4, 12 rows, holds
    // h's head and 11 rows of g), the keyless row, and 9 more rows of h, written after it.
    const rows = ['h', ...Array.from({ length: 21 }, () => 'g'), null, ...Array.from({ length: 9 }, () => 'h')];
    const { claimedIn, all, wanted } = await claimAllBut(rows, 4, 10);
    assert.equal(claimedIn.size, wanted, 'every row but g\'s claimed');
    const keyless = all.find((r) => r.key === null)!;
    t.diagnostic(`claims: ${all.filter((r) => r.key !== 'g').map((r) => `${r.key ?? 'keyless'}#${r.sequence}:${claimedIn.get(r.sequence)}`).join(' ')}`);
    assert.deepEqual(passing(claimedIn, keyless), [], `keyless row #${keyless.sequence} (claim ${claimedIn.get(keyless.sequence)}) passed by later rows`);
  });

  it('with no keyless row behind the window, a key whose head is in the window still takes its later rows as followers (rowsPerKey 10)', async () => {
    const rows = ['h', ...Array.from({ length: 21 }, () => 'g'), ...Array.from({ length: 9 }, () => 'h')];
    const { claimedIn, all } = await claimAllBut(rows, 4, 10);
    const h = all.filter((r) => r.key === 'h').map((r) => claimedIn.get(r.sequence));
    // The first claim: h's head and three followers past the window (a claim of 4); then 4 and 2.
    assert.deepEqual(h, [1, 1, 1, 1, 3, 3, 3, 3, 5, 5]);
  });

  // Seeded mixes of a few keys and keyless rows behind the key in flight g, claims of 4 whose rows
  // stay in flight for one more claim: no keyless row is passed by a later row, whatever took it.
  for (const rowsPerKey of [1, 10]) it(`a keyless row is never passed by a later row: 30 seeded mixes of keys and keyless rows behind a key in flight (rowsPerKey ${rowsPerKey})`, async () => {
    const failures: string[] = [];
    for (let seed = 1; seed <= 30; seed++) {
      let state = seed * 7919;
      const random = () => ((state = (state * 1103515245 + 12345) % 2147483648) / 2147483648);
      const rows: Array<string | null> = [];
      for (let i = 0; i < 60; i++) {
        const r = random();
        rows.push(r < 0.35 ? 'g' : r < 0.5 ? null : ['a', 'b', 'c', 'd'][Math.floor(random() * 4)]!);
      }
      if (!rows.includes('g')) rows.unshift('g');
      const { claimedIn, all, wanted } = await claimAllBut(rows, 4, rowsPerKey);
      if (claimedIn.size < wanted) failures.push(`seed ${seed}: ${wanted - claimedIn.size} rows never claimed`);
      for (const w of all.filter((r) => r.key === null && claimedIn.has(r.sequence))) {
        const passedBy = passing(claimedIn, w);
        if (passedBy.length > 0) failures.push(`seed ${seed}: keyless #${w.sequence} (claim ${claimedIn.get(w.sequence)}) passed by ${passedBy.join(', ')}`);
      }
    }
    assert.deepEqual(failures, []);
  });
});

/**
 * The work of a claim whose window is held by a key in flight must not grow with the number of
 * keys that have open rows: counted in shared buffers (deterministic, unlike time) of one claim
 * of 100 at 1,000 and at 20,000 open keys, with the plan settings the claim functions carry.
 */
describe('outbox claim: a blocked window costs the same at 1,000 and 20,000 open keys (PostgreSQL)', () => {
  const db = emptyOutboxEachTest();

  const LIMIT = 100;
  const buffersOfOneClaim = async (openKeys: number): Promise<{ buffers: number; claimed: number }> => {
    const t = `"${db().schema}".outbox`;
    // Hot key h: its head in flight, 400 rows behind it (more than the window), then the open keys, two rows each.
    await db().query(`INSERT INTO ${t} (topic, key, payload) SELECT 't', 'h', '{}' FROM generate_series(1, 401)`);
    await db().query(
      `UPDATE ${t} SET state = 'processing', claim_token = gen_random_uuid(), lease_expires_at = now() + interval '1 hour'
        WHERE sequence = (SELECT min(sequence) FROM ${t})`,
    );
    await db().query(`INSERT INTO ${t} (topic, key, payload) SELECT 't', 'k' || (g % $1), '{}' FROM generate_series(0, $1 * 2 - 1) g ORDER BY g`, [openKeys]);
    await db().query(`VACUUM ANALYZE ${t}`);
    return claimBuffers(db(), outboxClaimStatements(db().driver.ctx.names, LIMIT).full, true);
  };

  it('one claim of 100 reads about as many buffers at 20,000 open keys as at 1,000', async (t) => {
    const small = await buffersOfOneClaim(1_000);
    await db().query(`TRUNCATE "${db().schema}".outbox`);
    const large = await buffersOfOneClaim(20_000);
    assert.ok(small.buffers > 0 && large.buffers > 0, 'the plan reports its buffers');
    t.diagnostic(`buffers of one claim: ${small.buffers} at 1,000 open keys (${small.claimed} rows), ${large.buffers} at 20,000 (${large.claimed} rows)`);
    assert.ok(large.buffers <= small.buffers * 1.5, `buffers of one claim: ${small.buffers} at 1,000 open keys, ${large.buffers} at 20,000`);
  });
});

/**
 * The "nothing of its key in flight" test of every candidate row is one probe of the index of the
 * keys of rows in flight (`<table>_key_busy_idx`), whatever the number of keys in flight: a claim whose
 * window is all rows of keys in flight — the claim a second pass sends while the first holds every
 * key — must cost about the same at 4,000 keys in flight as at 200. Counted in shared buffers of
 * one claim of 100, each claim statement as a grown claim sends it (planned for its values) and
 * with the settings the claim functions carry.
 */
describe('outbox claim: rows of keys in flight are turned down by an index probe, whatever the number of keys in flight (PostgreSQL)', () => {
  const db = emptyOutboxEachTest();
  const LIMIT = 100;

  const buffersOfOneClaim = async (inFlight: number, which: 'window' | 'full', functionSettings: boolean): Promise<{ buffers: number; claimed: number }> => {
    const t = `"${db().schema}".outbox`;
    await db().query(`TRUNCATE ${t}`);
    // Every key: its head in flight, three rows behind it.
    await db().query(`INSERT INTO ${t} (topic, key, payload) SELECT 't', 'k' || (g % $1), '{}' FROM generate_series(0, $1 * 4 - 1) g ORDER BY g`, [inFlight]);
    await db().query(
      `UPDATE ${t} SET state = 'processing', claim_token = gen_random_uuid(), lease_expires_at = now() + interval '1 hour'
        WHERE id IN (SELECT DISTINCT ON (key) id FROM ${t} ORDER BY key, sequence)`,
    );
    await db().query(`VACUUM ANALYZE ${t}`);
    return claimBuffers(db(), outboxClaimStatements(db().driver.ctx.names, LIMIT)[which], functionSettings, true);
  };

  for (const which of ['window', 'full'] as const) {
    for (const functionSettings of [false, true]) {
      it(`the ${which} claim${functionSettings ? ' with the claim functions\' plan settings' : ' as a statement'}`, async (t) => {
        const small = await buffersOfOneClaim(200, which, functionSettings);
        const large = await buffersOfOneClaim(4_000, which, functionSettings);
        t.diagnostic(`buffers of one claim: ${small.buffers} at 200 keys in flight, ${large.buffers} at 4,000`);
        // The full claim answers one row (its sweep position) when it takes nothing.
        assert.ok(small.claimed <= 1 && large.claimed <= 1, `nothing can move: claimed ${small.claimed} and ${large.claimed}`);
        assert.ok(small.buffers > 0, 'the plan reports its buffers');
        assert.ok(large.buffers <= small.buffers * 2, `buffers of one claim: ${small.buffers} at 200 keys in flight, ${large.buffers} at 4,000`);
      });
    }
  }
});

/**
 * A few keys holding the backlog: the full claim's window (3 × batch of the oldest due rows) and
 * its sweep past the window are all runs of those keys, and only the first row of each key can be
 * its head. The full claim tests the first row of each key there only — the others have a row of
 * their key with a lower sequence in the same rows, pending in the same snapshot — so its head
 * test (an index probe of the key's lower rows) runs about once per key, not once per row. Counted
 * in the executed plan's loops of that probe, under the claim functions' plan settings (the shape
 * a large table gets: on this small one the planner is otherwise free to test the rows another way).
 */
describe('outbox full claim: a few keys\' runs are tested as heads once per key (PostgreSQL)', () => {
  const db = emptyOutboxEachTest();
  const LIMIT = 100;
  const KEYS = 20;

  /** Loops of the head test's probe (`sequence <` on the key-head index) in one run of the full claim, and the rows it answered. */
  const headProbes = async (): Promise<{ loops: number; claimed: number; heads: number }> => {
    const t = `"${db().schema}".outbox`;
    // 20 keys, 30 rows each, interleaved: the window of 300 holds 15 rows of every key.
    await db().query(`INSERT INTO ${t} (topic, key, payload) SELECT 't', 'k' || (g % ${KEYS}), '{}' FROM generate_series(0, ${KEYS * 30 - 1}) g ORDER BY g`);
    await db().query(`VACUUM ANALYZE ${t}`);
    const statement = outboxClaimStatements(db().driver.ctx.names, LIMIT).full;
    const client = await db().pool.connect();
    try {
      await client.query('BEGIN');
      for (const setting of CLAIM_FUNCTION_SETTINGS) await client.query(`SET LOCAL ${setting.replace('=', ' = ')}`);
      const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${statement.text}`, [LEASE, null, null, null, null]);
      const top = rows[0]!['QUERY PLAN'][0]!.Plan;
      let loops = 0;
      const walk = (node: PlanNode) => {
        if (node['Index Name'] === 'outbox_key_head_idx' && /sequence < /.test(String(node['Index Cond'] ?? ''))) loops += Number(node['Actual Loops'] ?? 0);
        for (const child of node.Plans ?? []) walk(child);
      };
      walk(top);
      const heads = await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${t} WHERE state = 'processing' AND key_first`);
      return { loops, claimed: Number(top['Actual Rows'] ?? 0), heads: Number(heads.rows[0]!.n) };
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  };

  it("the window's 300 rows and the sweep's 100 are probed about once per key", async (t) => {
    const { loops, claimed, heads } = await headProbes();
    t.diagnostic(`head probes: ${loops}; rows claimed: ${claimed}, heads among them: ${heads}`);
    assert.equal(heads, KEYS, 'the head of every key was claimed');
    assert.ok(claimed >= KEYS, `claimed ${claimed}`);
    assert.ok(loops > 0, 'the plan reports the probe');
    // Without the narrowing: 300 window rows + 100 sweep rows, each probed.
    assert.ok(loops <= KEYS * 3, `head probes ${loops}, for ${KEYS} keys`);
  });
});

interface PlanNode {
  'Index Name'?: string;
  'Index Cond'?: string;
  'Actual Loops'?: number;
  'Actual Rows'?: number;
  Plans?: PlanNode[];
}

/**
 * Claim order is `scheduled_at`, then `sequence`: among rows due at the same time the lower
 * sequence first, and an earlier `scheduled_at` before any sequence. Both outbox claim
 * statements: the window claim, and the full claim that looks past a window held by a key in flight.
 */
describe('outbox claim order: scheduled_at, then sequence (PostgreSQL)', () => {
  const db = emptyOutboxEachTest();

  // label, key, scheduled (seconds before now) — inserted in this order, so sequence follows the list.
  const rows: Array<[string, string | null, number]> = [
    ['a', 'ka', 60],
    ['b', null, 60],
    ['c', 'kc', 60],
    ['d', 'kd', 120],
    ['e', null, 120],
    ['f', 'kf', 60],
  ];
  const expected = ['d', 'e', 'a', 'b', 'c', 'f'];

  // One statement: `now()` is one instant, so rows scheduled the same seconds ago share their
  // `scheduled_at` exactly, and `sequence` follows the list.
  const insertRows = async () => {
    const values = rows.map((_, i) => `($${i * 3 + 1}::text, $${i * 3 + 2}::varchar, $${i * 3 + 3}::int, ${i})`).join(', ');
    await db().query(
      `INSERT INTO "${db().schema}".outbox (topic, key, payload, scheduled_at)
       SELECT 't', key, jsonb_build_object('label', label), now() - make_interval(secs => ago)
         FROM (VALUES ${values}) v(label, key, ago, i) ORDER BY i`,
      rows.flat(),
    );
    const distinct = await db().query<{ n: string }>(`SELECT count(DISTINCT scheduled_at) AS n FROM "${db().schema}".outbox WHERE key IS DISTINCT FROM 'h'`);
    assert.equal(Number(distinct[0]!.n), 2, 'two scheduled_at values among the six rows');
  };
  const claimOneByOne = async (driver: TestDatabase['driver'], n: number) => {
    const order: string[] = [];
    for (let i = 0; i < n; i++) {
      const claimed = await driver.outboxClaimMany({ limit: 1, leaseMs: LEASE });
      order.push(...claimed.map((r) => (r.payload as { label?: string }).label ?? `key ${r.key}`));
    }
    return order;
  };

  it('the window claim: equal scheduled_at by sequence, earlier scheduled_at first', async () => {
    await insertRows();
    assert.deepEqual(await claimOneByOne(db().newDriver(), rows.length), expected);
  });

  it('the full claim past a window held by a key in flight: the same order', async () => {
    const driver = db().newDriver();
    // Key h: head in flight, the window's worth of rows of a claim of 1 behind it (3), all due before the rows below.
    await db().query(
      `INSERT INTO "${db().schema}".outbox (topic, key, payload, scheduled_at) SELECT 't', 'h', '{}', now() - interval '1 hour' FROM generate_series(0, $1::int)`,
      [OLDEST_WINDOW],
    );
    const [hot] = await driver.outboxClaimMany({ limit: 1, leaseMs: LEASE });
    assert.equal(hot?.key, 'h');
    await insertRows();
    assert.deepEqual(await claimOneByOne(driver, rows.length), expected);
  });
});
