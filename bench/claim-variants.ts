/**
 * `npx tsx bench/claim-variants.ts`: candidate forms of the outbox claim statement, measured.
 *
 * For each scenario the table is seeded with QueueBox's migrations, brought into the state the
 * claim meets in a drain, and each variant is run under `EXPLAIN (ANALYZE, BUFFERS)` inside a
 * rolled-back transaction (so every variant sees the same rows). Buffers are deterministic;
 * times are noisy on a shared machine. Then each variant drains the keyed workload with two
 * concurrent claim/settle loops (the floor's loop), to show what the plan costs in messages/s.
 *
 * Scenarios:
 * - keys-100 blocked: 20,000 rows over 100 keys, the first claim took all 100 heads (they are
 *   `processing`), so the next claim can find nothing — the pipelined second claim of a pass;
 * - keys-10000: 20,000 rows over 10,000 keys after one claim of 100;
 * - backlog: 1,000,000 keyless rows after 20,000 were drained (dead index entries at the head).
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseConfig } from '../lib/config/load-config.ts';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { quoteIdent } from '../lib/db/postgres/names.ts';
import { startEmbeddedDatabase } from '../lib/local/embedded-database.ts';
import { createdSchema, dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';
import { keyExpression } from './workloads.ts';

const LIMIT = 100;
const WINDOW = 1000;

const HEAD = (t: string) =>
  `(c.key IS NULL OR NOT EXISTS (SELECT 1 FROM ${t} h WHERE h.key = c.key AND h.state IN ('pending', 'processing') AND h.sequence < c.sequence))`;

const UPDATE = (t: string, from: string) => `UPDATE ${t} o
   SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = clock_timestamp(),
       lease_expires_at = clock_timestamp() + interval '5 minutes', updated_at = clock_timestamp()
  FROM ${from} WHERE o.id = candidates.id
RETURNING o.id, o.topic, o.key, o.payload, o.headers, o.attempt, o.max_attempts, o.sequence, o.replay_count, o.created_at, o.claim_token, o.lease_expires_at`;

/** The claim forms compared; `t` is the qualified outbox table. */
export const VARIANTS: Record<string, (t: string) => string> = {
  /** lib/db/postgres/outbox-queries.ts as it stands. */
  current: (t) => `WITH candidates AS (
    SELECT c.id FROM ${t} c
     WHERE c.state = 'pending' AND c.scheduled_at <= clock_timestamp() AND ${HEAD(t)}
     ORDER BY c.scheduled_at, c.sequence LIMIT ${LIMIT} FOR UPDATE SKIP LOCKED)
  ${UPDATE(t, 'candidates')}`,
  /** Due test on a stable clock (`statement_timestamp()`), usable as an index condition. */
  stableClock: (t) => `WITH candidates AS (
    SELECT c.id FROM ${t} c
     WHERE c.state = 'pending' AND c.scheduled_at <= statement_timestamp() AND ${HEAD(t)}
     ORDER BY c.scheduled_at, c.sequence LIMIT ${LIMIT} FOR UPDATE SKIP LOCKED)
  ${UPDATE(t, 'candidates')}`,
  /**
   * Bounded look-ahead: only the first WINDOW due pending rows (index order, no locks) are
   * tested for head-of-key, then locked with SKIP LOCKED and re-checked as before.
   */
  window: (t) => `WITH look AS (
    SELECT id FROM ${t} WHERE state = 'pending' AND scheduled_at <= statement_timestamp()
     ORDER BY scheduled_at, sequence LIMIT ${WINDOW}),
  candidates AS (
    SELECT c.id FROM look JOIN ${t} c ON c.id = look.id
     WHERE c.state = 'pending' AND ${HEAD(t)}
     ORDER BY c.scheduled_at, c.sequence LIMIT ${LIMIT} FOR UPDATE OF c SKIP LOCKED)
  ${UPDATE(t, 'candidates')}`,
  /**
   * Bounded look-ahead kept in index order: the window is a plain subquery whose order the outer
   * ORDER BY reuses, so the nested loop stops at the LIMIT instead of testing the whole window.
   */
  windowOrdered: (t) => `WITH candidates AS (
    SELECT c.id FROM (
        SELECT id, scheduled_at, sequence FROM ${t}
         WHERE state = 'pending' AND scheduled_at <= statement_timestamp()
         ORDER BY scheduled_at, sequence LIMIT ${WINDOW}) look
      JOIN ${t} c ON c.id = look.id
     WHERE c.state = 'pending' AND ${HEAD(t)}
     ORDER BY look.scheduled_at, look.sequence LIMIT ${LIMIT} FOR UPDATE OF c SKIP LOCKED)
  ${UPDATE(t, 'candidates')}`,
};

interface Scenario {
  name: string;
  rows: number;
  keys: number;
  /** Rows claimed (and left processing) or drained (sent) before the measured claim. */
  prepare: (client: pg.Client, t: string) => Promise<void>;
}

const settle = (t: string) =>
  `UPDATE ${t} o SET state = 'sent', updated_at = clock_timestamp(), lease_expires_at = NULL
     FROM unnest($1::uuid[]) AS s(id) WHERE o.id = s.id AND o.state = 'processing'`;

async function seed(url: string, schema: string, rows: number, keys: number): Promise<string> {
  const config = parseConfig({ database: { url, schema } });
  const driver = new PostgresDriver({ config, url });
  await driver.migrate();
  await driver.close();
  const t = `${quoteIdent(schema)}.${quoteIdent('outbox')}`;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(
    `INSERT INTO ${t} (topic, key, payload) SELECT 'bench.event', ${keyExpression({ keys }, 'g')}, jsonb_build_object('i', g, 'body', 'x')
       FROM generate_series(1, $1::int) g ORDER BY g`,
    [rows],
  );
  await client.query(`VACUUM ANALYZE ${t}`);
  await client.end();
  return t;
}

async function explain(client: pg.Client, sql: string): Promise<{ ms: number; buffers: number; rows: number; plan: string }> {
  await client.query('BEGIN');
  try {
    const { rows } = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) ${sql}`);
    const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
    const ms = Number(/Execution Time: ([\d.]+)/.exec(plan)?.[1] ?? NaN);
    const top = /Buffers: shared hit=(\d+)(?: read=(\d+))?/.exec(plan);
    const buffers = top ? Number(top[1]) + Number(top[2] ?? 0) : NaN;
    const returned = Math.round(Number(/Update on .*?\(actual time=[\d.]+\.\.[\d.]+ rows=([\d.]+)/.exec(plan)?.[1] ?? NaN));
    return { ms, buffers, rows: returned, plan };
  } finally {
    await client.query('ROLLBACK');
  }
}

async function drainRate(url: string, t: string, sql: string, target: number): Promise<number> {
  let moved = 0;
  const started = performance.now();
  const loop = async () => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    while (moved < target) {
      const { rows } = await client.query<{ id: string }>(sql);
      if (rows.length === 0) {
        await new Promise((resolve) => setTimeout(resolve, 1));
        continue;
      }
      moved += rows.length;
      await client.query(settle(t), [rows.map((r) => r.id)]);
    }
    await client.end();
  };
  await Promise.all([loop(), loop()]);
  return Math.round(moved / ((performance.now() - started) / 1000));
}

async function main(): Promise<void> {
  dropSchemasOnSignal();
  const { values } = parseArgs({ options: {
      plans: { type: 'boolean', default: false },
      backlog: { type: 'string', default: '1000000' },
      variants: { type: 'string' },
      scenarios: { type: 'string' },
    }, });
  const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedDatabase();
  const url = process.env.DATABASE_URL ?? embedded!.url;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const claimOnce = async (client: pg.Client, t: string) => (await client.query<{ id: string }>(VARIANTS.current!(t))).rows.map((r) => r.id);
  const scenarios: Scenario[] = [
    { name: 'keys-100 blocked', rows: 20_000, keys: 100, prepare: async (c, t) => void (await claimOnce(c, t)) },
    { name: 'keys-10000', rows: 20_000, keys: 10_000, prepare: async (c, t) => void (await claimOnce(c, t)) },
    {
      name: 'backlog',
      rows: Number(values.backlog),
      keys: 0,
      prepare: async (c, t) => {
        for (let i = 0; i < 200; i++) await c.query(settle(t), [await claimOnce(c, t)]);
      },
    },
  ];
  try {
    const pickedVariants = Object.entries(VARIANTS).filter(([n]) => !values.variants || values.variants.split(',').includes(n));
    for (const s of scenarios.filter((x) => !values.scenarios || values.scenarios.split(',').some((p) => x.name.startsWith(p)))) {
      for (const [name, build] of pickedVariants) {
        const schema = `qb_claim_${Math.random().toString(36).slice(2, 10)}`;
        const forget = createdSchema(url, schema);
        try {
          const t = await seed(url, schema, s.rows, s.keys);
          await s.prepare(admin, t);
          const e = await explain(admin, build(t));
          const line: Record<string, unknown> = { scenario: s.name, variant: name, executionMs: e.ms, sharedBuffers: e.buffers, rowsClaimed: e.rows };
          if (s.keys > 0) {
            await admin.query(`UPDATE ${t} SET state = 'pending', claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL WHERE state = 'processing'`);
            line.drainMessagesPerSecond = await drainRate(url, t, build(t), s.rows);
          }
          process.stdout.write(`${JSON.stringify(line)}\n`);
          if (values.plans) process.stdout.write(`${e.plan}\n\n`);
        } finally {
          await admin.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
          forget();
        }
      }
    }
  } finally {
    await admin.end();
    await embedded?.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
