/**
 * `npm run bench:claim-plans`: `EXPLAIN (ANALYZE, BUFFERS)` of one claim (outbox, relay or pull)
 * on a large keyed table, as a drain leaves it.
 *
 * Seeds `--rows` pending rows over `--keys` keys (`'k' || (g % keys)`, 0 = keyless) in a fresh
 * schema — outbox rows, or push / pull inbox rows of one source for `relay` / `pull` — puts the
 * head of the first `--in-flight` keys into `processing`, runs `VACUUM ANALYZE`, then explains the
 * exact statement the driver sends for a batch of `--limit` (default 100) in a rolled-back
 * transaction. Prints one JSON line (claimed rows, buffers, execution time); `--plan` also prints
 * the plan. `--function` (outbox): explains the call of the statement's claim function instead,
 * on one connection, after seven calls (PL/pgSQL then keeps its generic plan); its buffers are
 * the function's statement's (the plan inside is not shown). Uses DATABASE_URL.
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseConfig } from '../lib/config/load-config.ts';
import type { PgContext } from '../lib/db/postgres/context.ts';
import { inboxClaimPushMany } from '../lib/db/postgres/inbox-queries.ts';
import { outboxClaimMany, outboxClaimStatements } from '../lib/db/postgres/outbox-queries.ts';
import { claimFunctionName } from '../lib/db/postgres/claim-functions.ts';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { pullClaimMany } from '../lib/db/postgres/pull-queries.ts';
import { quoteIdent } from '../lib/db/postgres/names.ts';
import { createdSchema, dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';

type Kind = 'outbox' | 'relay' | 'pull';

/** Runs the claim against a pool that records the claim statement instead of running it. */
async function claimText(ctx: PgContext, kind: Kind, limit: number): Promise<{ text: string; values: unknown[] }> {
  let captured: { text: string; values: unknown[] } | undefined;
  const recorder = {
    query: async (q: string | { text: string; values: unknown[] }, v?: unknown[]) => {
      const [text, values] = typeof q === 'string' ? [q, v ?? []] : [q.text, q.values];
      if (/claim_token = (pg_catalog\.)?gen_random_uuid\(\)/.test(text)) captured = { text, values };
      return { rows: [], rowCount: 0 };
    },
    release: () => {},
  };
  // Without claim functions: the statement itself is sent (and recorded).
  const recording = { ...ctx, claimFunctions: undefined, pool: { ...recorder, options: {}, connect: async () => recorder } as unknown as pg.Pool };
  if (kind === 'outbox') await outboxClaimMany(recording, { limit, leaseMs: 30_000 });
  else if (kind === 'relay') await inboxClaimPushMany(recording, { limit, leaseMs: 30_000 });
  else await pullClaimMany(recording, { source: 'src', limit, leaseMs: 30_000 });
  if (!captured) throw new Error(`bench: no ${kind} claim statement was sent`);
  return captured;
}

async function main(): Promise<void> {
  dropSchemasOnSignal();
  const { values } = parseArgs({
    options: {
      kind: { type: 'string', default: 'outbox' },
      rows: { type: 'string', default: '1000000' },
      keys: { type: 'string', default: '100' },
      'in-flight': { type: 'string', default: '50' },
      limit: { type: 'string', default: '100' },
      plan: { type: 'boolean', default: false },
      function: { type: 'boolean', default: false },
    },
  });
  const kind = values.kind as Kind;
  const [rows, keys, inFlight, limit] = [values.rows, values.keys, values['in-flight'], values.limit].map(Number) as [number, number, number, number];
  if (!['outbox', 'relay', 'pull'].includes(kind)) throw new Error('--kind is outbox, relay or pull');
  if ([rows, keys, inFlight, limit].some((n) => !Number.isInteger(n) || n < 0) || rows < 1 || limit < 1) throw new Error('--rows, --limit positive; --keys, --in-flight non-negative integers');
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is required');
  const schema = `qb_plans_${randomBytes(4).toString('hex')}`;
  const forget = createdSchema(url, schema);
  const driver = new PostgresDriver({ config: parseConfig({ database: { url, schema } }), url });
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await driver.migrate();
    const key = keys === 0 ? 'NULL' : `'k' || (g % ${keys})`;
    const table = `${quoteIdent(schema)}.${quoteIdent(kind === 'outbox' ? 'outbox' : 'inbox')}`;
    const keyColumn = kind === 'outbox' ? 'key' : 'aggregate_id';
    await admin.query(
      kind === 'outbox'
        ? `INSERT INTO ${table} (topic, key, payload) SELECT 'e', ${key}, jsonb_build_object('i', g) FROM generate_series(1, $1::int) g ORDER BY g`
        : `INSERT INTO ${table} (source, idempotency_key, aggregate_id, payload, consumption)
           SELECT 'src', 'm' || g, ${key}, jsonb_build_object('i', g), '${kind === 'relay' ? 'push' : 'pull'}' FROM generate_series(1, $1::int) g ORDER BY g`,
      [rows],
    );
    if (inFlight > 0) {
      await admin.query(
        `UPDATE ${table} SET state = 'processing', claim_token = gen_random_uuid(), lease_expires_at = now() + interval '1 hour'
          WHERE id IN (SELECT DISTINCT ON (${keyColumn}) id FROM ${table} WHERE ${keyColumn} IS NOT NULL ORDER BY ${keyColumn}, sequence LIMIT ${inFlight})`,
      );
    }
    await admin.query(`VACUUM ANALYZE ${table}`);
    let claim = await claimText(driver.ctx, kind, limit);
    if (values.function) {
      if (kind !== 'outbox') throw new Error('--function: only the outbox claims run as functions');
      const statements = outboxClaimStatements(driver.ctx.names, limit);
      const statement = [statements.window, statements.full].find((s) => s.text === claim.text);
      if (!statement) throw new Error('bench: the recorded claim is neither outbox claim statement');
      const args = statement.params.map((type, i) => `$${i + 1}::${type}`).join(', ');
      claim = { text: `SELECT * FROM ${quoteIdent(schema)}.${quoteIdent(claimFunctionName(statement))}(${args})`, values: claim.values };
    }
    const explain = async () => {
      await admin.query('BEGIN');
      const lines = (await admin.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS) ${claim.text}`, claim.values)).rows.map((r) => r['QUERY PLAN']);
      await admin.query('ROLLBACK');
      return lines;
    };
    if (values.function) for (let i = 0; i < 7; i++) await explain();
    const plan = await explain();
    // PostgreSQL 18 writes the rows with two decimals (`rows=10.00`), earlier versions as a whole number.
    const claimed = Math.round(Number(/rows=([\d.]+) loops/.exec(plan[0]!)?.[1] ?? 0));
    const buffers = /shared hit=(\d+)(?: read=(\d+))?/.exec(plan.find((l) => l.includes('Buffers:')) ?? '');
    const total = buffers ? Number(buffers[1]) + Number(buffers[2] ?? 0) : 0;
    process.stdout.write(
      `${JSON.stringify({ kind, via: values.function ? 'function' : 'statement', rows, keys, inFlight, limit, claimed, buffers: total, buffersPerClaimedRow: claimed > 0 ? Math.round(total / claimed) : null, executionTime: plan.find((l) => l.startsWith('Execution Time')) })}\n`,
    );
    if (values.plan) process.stdout.write(`${plan.join('\n')}\n`);
  } finally {
    await admin.query('ROLLBACK').catch(() => {});
    await admin.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
    forget();
    await admin.end();
    await driver.close();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
