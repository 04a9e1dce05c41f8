import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { reclaimChunking, RECLAIM_CHUNK_ROWS } from '../../lib/db/postgres/fenced-writes.ts';
import { LOST_LEASE_NOT_CHARGED } from '../../lib/db/postgres/outbox-queries.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { METRICS } from '../../lib/observability/metric-names.ts';
import { TransientDatabaseError } from '../../lib/errors.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { emfValue } from '../helpers/emf.ts';
import { passFixture, withOutboxDatabase } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { RecordingLogger } from '../helpers/recording-logger.ts';
import { createRoleWith, driverAsRole } from '../foundation/role-settings-fixtures.ts';

/**
 * The PostgreSQL reclaim works in chunks that each commit (`reclaimExpired`). Before, it was one
 * statement for every expired row: after an outage with a large backlog of expired leases (a
 * million rows: 26 s and more on a small server) every pass's deadline cancelled it, it rolled
 * back whole, and no reclaim ever returned a row; under a small `temp_file_limit` it failed
 * outright. Now each chunk commits its rows and counts; a chunk cut at the deadline rolls back
 * alone, and the reclaim answers with what the chunks before it did.
 *
 * Chunks are made small here (`reclaimChunking.rows`) to cross their boundaries with a handful of
 * rows; a trigger on the table records each reclaim statement (the rows it updated) and fails or
 * slows the ones a test picks, in place of a deadline: no assertion depends on timing.
 */
describe('the PostgreSQL reclaim: chunks that each commit', () => {
  let db: TestDatabase;
  withOutboxDatabase((d) => (db = d));

  const triggers: Array<'outbox' | 'inbox'> = [];
  afterEach(async () => {
    reclaimChunking.rows = RECLAIM_CHUNK_ROWS;
    for (const table of triggers.splice(0)) await db.query(`DROP TRIGGER IF EXISTS reclaim_watch ON "${db.schema}".${table}`);
    await db.query(`DELETE FROM "${db.schema}".inbox`);
  });

  /**
   * Watches the reclaim statements on `table`: each one (its text compares leases with the
   * statement's start) adds the number of rows it updated to `reclaim_log` (rolled back with a
   * statement that fails). The statement numbered `from` on (a sequence: not rolled back) fails
   * as a cancelled one (`57014`, `cancel: 'fail'`) or sleeps 30 s (`cancel: 'sleep'`, for a real
   * deadline to cut); a statement that updates more than `over` rows fails the same way.
   */
  async function watchReclaims(table: 'outbox' | 'inbox', options: { from?: number; over?: number; cancel?: 'fail' | 'sleep' } = {}): Promise<void> {
    const s = `"${db.schema}"`;
    await db.query(`CREATE TABLE IF NOT EXISTS ${s}.reclaim_log (at bigserial, n int)`);
    await db.query(`TRUNCATE ${s}.reclaim_log`);
    await db.query(`DROP SEQUENCE IF EXISTS ${s}.reclaim_statements; CREATE SEQUENCE ${s}.reclaim_statements`);
    const cancel =
      options.cancel === 'sleep'
        ? 'PERFORM pg_sleep(30)'
        : `RAISE EXCEPTION USING ERRCODE = 'query_canceled', MESSAGE = 'canceling statement due to statement timeout'`;
    await db.query(`CREATE OR REPLACE FUNCTION ${s}.reclaim_watch() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE
        moved int;
        nth bigint;
      BEGIN
        IF current_query() NOT LIKE '%lease_expires_at <= pg_catalog.statement_timestamp()%' THEN RETURN NULL; END IF;
        SELECT count(*) INTO moved FROM moved_rows;
        nth := nextval('${s}.reclaim_statements');
        IF nth >= ${options.from ?? 'NULL'} OR moved > ${options.over ?? 'NULL'} THEN ${cancel}; END IF;
        INSERT INTO ${s}.reclaim_log (n) VALUES (moved);
        RETURN NULL;
      END $$`);
    await db.query(`CREATE TRIGGER reclaim_watch AFTER UPDATE ON ${s}.${table} REFERENCING NEW TABLE AS moved_rows FOR EACH STATEMENT EXECUTE FUNCTION ${s}.reclaim_watch()`);
    triggers.push(table);
  }
  const statements = async () => (await db.query<{ n: number }>(`SELECT n FROM "${db.schema}".reclaim_log ORDER BY at`)).map((r) => r.n);

  interface Claim {
    key?: string;
    rows: number;
    /** Seconds ago its lease ended (claims are picked oldest lease first). */
    endedSecondsAgo: number;
    /** The attempt its rows were at (`max_attempts` is 2: at 1, the lost attempt was the last). */
    attempt?: number;
  }
  /** Writes expired claims as the claim leaves them: one token per claim, the key's first row marked. Returns the ids per claim, in order. */
  async function expiredClaims(claims: Claim[]): Promise<string[][]> {
    const ids: string[][] = [];
    let sequence = 0;
    for (const claim of claims) {
      const rows = await db.query<{ id: string }>(
        `INSERT INTO "${db.schema}".outbox (topic, key, payload, state, attempt, max_attempts, claim_token, claimed_at, lease_expires_at, key_first, sequence)
         SELECT 'orders', $1, '{}', 'processing', $2, 2, t.token, now() - interval '5 minutes', now() - $3 * interval '1 second', r = 1, $4 + r
           FROM (SELECT gen_random_uuid() AS token) t CROSS JOIN generate_series(1, $5::int) r
          ORDER BY r
         RETURNING id`,
        [claim.key ?? null, claim.attempt ?? 0, claim.endedSecondsAgo, sequence, claim.rows],
      );
      sequence += claim.rows;
      ids.push(rows.map((r) => r.id));
    }
    return ids;
  }
  const rowsOf = async (ids: string[]) =>
    (await db.query<{ id: string; state: string; attempt: number; last_error: string | null }>(`SELECT id, state, attempt, last_error FROM "${db.schema}".outbox WHERE id = ANY($1::uuid[]) ORDER BY sequence`, [ids])).map(
      (r) => ({ state: r.state, attempt: r.attempt, charged: r.last_error !== LOST_LEASE_NOT_CHARGED }),
    );

  it('a reclaim larger than any one statement may be returns every row, chunk by chunk, each committed', async () => {
    reclaimChunking.rows = 3;
    await expiredClaims(Array.from({ length: 10 }, (_, n) => ({ rows: 1, endedSecondsAgo: 60 - n })));
    // A statement of more than 3 rows is cancelled, as one too long for the deadline would be.
    await watchReclaims('outbox', { over: 3 });
    const result = await db.driver.outboxReclaimExpired({});
    assert.deepEqual(result, { ran: true, reclaimed: 10, dead: 0 }, 'every row, and no cut');
    assert.deepEqual(await statements(), [3, 3, 3, 1], 'four statements: three full chunks and the last, shorter one');
  });

  it('a claim cut by a chunk\'s limit comes back whole in that chunk, charged once; a claim of more rows than a chunk too', async () => {
    reclaimChunking.rows = 3;
    const [a, b, c, keyless] = await expiredClaims([
      { key: 'a', rows: 2, endedSecondsAgo: 40 },
      { key: 'b', rows: 5, endedSecondsAgo: 30 },
      { key: 'c', rows: 2, endedSecondsAgo: 20 },
      { rows: 1, endedSecondsAgo: 10 },
    ]);
    await watchReclaims('outbox');
    const result = await db.driver.outboxReclaimExpired({});
    assert.deepEqual(result, { ran: true, reclaimed: 10, dead: 0 });
    // The first chunk picks a's two rows and b's first (its limit), and takes the rest of b with them.
    assert.deepEqual(await statements(), [7, 3, 0], 'a and the whole of b, then c and the keyless row, then none left');
    const chargedOnce = (n: number) => Array.from({ length: n }, (_, i) => ({ state: 'pending', attempt: i === 0 ? 1 : 0, charged: i === 0 }));
    assert.deepEqual(await rowsOf(a!), chargedOnce(2));
    assert.deepEqual(await rowsOf(b!), chargedOnce(5), 'the claim of five rows, past a chunk of three, came back whole and was charged once, to its first row');
    assert.deepEqual(await rowsOf(c!), chargedOnce(2));
    assert.deepEqual(await rowsOf(keyless!), chargedOnce(1));
  });

  it('a later chunk that fails rolls back alone: the reclaim answers with the rows the chunks before it returned and made dead', async () => {
    reclaimChunking.rows = 3;
    // Six rows at their last attempt (1 of 2): each goes dead.
    const claims = await expiredClaims(Array.from({ length: 6 }, (_, n) => ({ rows: 1, endedSecondsAgo: 60 - n, attempt: 1 })));
    await watchReclaims('outbox', { from: 2 });
    const result = await db.driver.outboxReclaimExpired({});
    assert.deepEqual({ ran: result.ran, reclaimed: result.reclaimed, dead: result.dead }, { ran: true, reclaimed: 0, dead: 3 }, 'the dead rows of the committed chunk are counted');
    assert.ok(result.cutBy instanceof TransientDatabaseError && result.cutBy.code === '57014', `cut by the cancelled chunk (${String(result.cutBy)})`);
    const states = (await rowsOf(claims.flat())).map((r) => r.state);
    assert.deepEqual(states, ['dead', 'dead', 'dead', 'processing', 'processing', 'processing'], 'the first chunk committed, the second rolled back');
    await db.query(`DROP TRIGGER reclaim_watch ON "${db.schema}".outbox`);
    assert.deepEqual(await db.driver.outboxReclaimExpired({}), { ran: true, reclaimed: 0, dead: 3 }, 'the next reclaim takes the rest');
  });

  it('the throttle gate opens once per reclaim: its later chunks are not refused, and the next reclaim within the throttle is', async () => {
    reclaimChunking.rows = 2;
    await expiredClaims(Array.from({ length: 5 }, (_, n) => ({ rows: 1, endedSecondsAgo: 60 - n })));
    await watchReclaims('outbox');
    assert.deepEqual(await db.driver.outboxReclaimExpired({ throttleMs: 60_000 }), { ran: true, reclaimed: 5, dead: 0 });
    assert.deepEqual(await statements(), [2, 2, 1]);
    await expiredClaims([{ rows: 1, endedSecondsAgo: 5 }]);
    assert.deepEqual(await db.driver.outboxReclaimExpired({ throttleMs: 60_000 }), { ran: false, reclaimed: 0, dead: 0 });
  });

  it('outbox pass: a reclaim cut at the pass deadline after a chunk committed counts that chunk, and the pass ends at its deadline', async () => {
    reclaimChunking.rows = 3;
    // The first chunk: two rows back to pending and one dead (its last attempt); three more after it.
    await expiredClaims([
      { rows: 1, endedSecondsAgo: 60 },
      { rows: 1, endedSecondsAgo: 59, attempt: 1 },
      { rows: 1, endedSecondsAgo: 58 },
      ...Array.from({ length: 3 }, (_, n) => ({ rows: 1, endedSecondsAgo: 50 - n })),
    ]);
    await watchReclaims('outbox', { from: 2, cancel: 'sleep' });
    const fixture = passFixture(db, { destinations: [new RecordingDestination()], context: createInvocationContext({ timeoutMs: 6000 }), marginMs: 3000, mode: 'deadline' });
    const summary = await runOutboxPass(fixture);
    assert.equal(summary.stoppedBecause, 'deadline');
    assert.deepEqual([summary.reclaimRan, summary.reclaimed], [true, 2], 'the committed chunk is counted');
    assert.equal(emfValue(fixture.lines, METRICS.outboxMessages.name, { status: 'dead' }), 1, 'the row it made dead reaches the dead-message metric');
    assert.equal(emfValue(fixture.lines, METRICS.outboxReclaimed.name), 2);
    assert.ok(fixture.logger.at('warn').some((e) => e.message.startsWith('outbox reclaim cut short at the pass deadline')), 'the cut is logged as a warning');
  });

  it('relay pass: a reclaim cut at the pass deadline after a chunk committed counts that chunk', async () => {
    reclaimChunking.rows = 2;
    const inbox = `"${db.schema}".inbox`;
    await db.query(`INSERT INTO ${inbox} (source, idempotency_key, payload, consumption, state, attempt, claim_token, claimed_at, lease_expires_at)
      SELECT 'shop', 'k' || g, '{}', 'push', 'processing', 0, gen_random_uuid(), now() - interval '5 minutes', now() - (60 - g) * interval '1 second'
        FROM generate_series(1, 4) g`);
    await watchReclaims('inbox', { from: 2, cancel: 'sleep' });
    const lines: string[] = [];
    const logger = new RecordingLogger();
    const summary = await runRelayPass({
      config: db.config,
      driver: db.driver,
      logger: logger as never,
      metrics: new QueueBoxMetrics({ namespace: 'QueueBoxTest', serviceName: 'queuebox-test', write: (line) => lines.push(line) }),
      deadline: createDeadline(createInvocationContext({ timeoutMs: 6000 }), 3000),
      mode: 'drain',
    });
    assert.equal(summary.reclaimed, 2, 'the committed chunk is counted');
    assert.ok(logger.at('warn').some((e) => e.message.startsWith('inbox reclaim cut short at the pass deadline')), 'the cut is logged as a warning');
    const [left] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${inbox} WHERE state = 'processing'`);
    assert.equal(left!.n, 2, 'the cut chunk rolled back');
  });

  it('succeeds under a small temp_file_limit with a large expired backlog: each chunk\'s sets fit in work_mem', { timeout: 120_000 }, async () => {
    // 5,000 expired claims of 10 rows of a key (the default rowsPerKey). One statement for them all
    // spilled its sets to temporary files and failed with "temporary file size exceeds temp_file_limit".
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload, state, claim_token, lease_expires_at, claimed_at, key_first, sequence)
      SELECT 'orders', 'k' || (g / 10), '{}', 'processing', md5('t' || (g / 10))::uuid,
             now() - interval '1 minute' - (g / 1000) * interval '1 ms', now() - interval '2 minutes', g % 10 = 0, g + 1
        FROM generate_series(0, 49999) g`);
    await db.query(`ANALYZE "${db.schema}".outbox`);
    const role = await createRoleWith(db, { temp_file_limit: '1MB' });
    const driver = driverAsRole(db, role);
    try {
      assert.deepEqual(await driver.outboxReclaimExpired({}), { ran: true, reclaimed: 50_000, dead: 0 });
    } finally {
      await driver.close();
      await role.drop();
    }
    const [left] = await db.query<{ processing: number; charged: number }>(
      `SELECT count(*) FILTER (WHERE state = 'processing')::int AS processing, count(*) FILTER (WHERE attempt = 1)::int AS charged FROM "${db.schema}".outbox`,
    );
    assert.deepEqual({ ...left }, { processing: 0, charged: 5000 }, 'every claim back, charged once');
  });
});
