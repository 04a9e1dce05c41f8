/**
 * `npm run bench:settle-encoding [-- --rows 1000 --runs 60]`: QueueBox's sent mark of one batch
 * (`outboxMarkSentMany`'s statement: the fence, the answer of the rows not changed) with its id
 * and token arrays bound as text (`pg`'s array literal) and in binary (`lib/db/postgres/uuid-array.ts`),
 * alternating on one connection, in the same run.
 *
 * Each run claims `--rows` rows of a keyless outbox table through the driver, then marks them sent
 * with one of the two encodings; the first four runs of each are not counted. Reported per
 * encoding: the median time of the statement (the server's work and the client's, one statement
 * in flight), the client's CPU per statement and the bytes of the statement's bind values.
 * Uses DATABASE_URL, or starts an embedded PostgreSQL.
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseConfig } from '../lib/config/load-config.ts';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { quoteIdent } from '../lib/db/postgres/names.ts';
import { changedIdsStatement } from '../lib/db/postgres/fenced-writes.ts';
import { outboxMarkSentUpdate } from '../lib/db/postgres/outbox-queries.ts';
import { binaryUuidArray } from '../lib/db/postgres/uuid-array.ts';
import { startEmbeddedDatabase } from '../lib/local/embedded-database.ts';
import { createdSchema, dropSchemasOnSignal } from '../test/helpers/drop-on-signal.ts';

const ENCODINGS = ['text', 'binary'] as const;
type Encoding = (typeof ENCODINGS)[number];

/** The length of the array literal `pg` sends for `xs`: {"…","…"}. */
const literal = (xs: string[]): number => 4 + xs.join('","').length;

async function main(): Promise<void> {
  dropSchemasOnSignal();
  const { values } = parseArgs({ options: { rows: { type: 'string', default: '1000' }, runs: { type: 'string', default: '60' } } });
  const rows = Number(values.rows);
  const runs = Number(values.runs);
  if (!Number.isInteger(rows) || rows < 1) throw new Error(`--rows: ${values.rows} is not a positive integer`);
  if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs: ${values.runs} is not a positive integer`);
  const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedDatabase();
  const url = process.env.DATABASE_URL ?? embedded!.url;
  const schema = `bench_settle_${process.pid}`;
  const forget = createdSchema(url, schema);
  const config = parseConfig({ database: { url, schema } });
  const driver = new PostgresDriver({ config, url });
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await driver.migrate();
    const table = `${quoteIdent(schema)}.outbox`;
    // The driver's own statement (`outboxMarkSentMany`), sent on a plain client with either encoding.
    const sentMark = changedIdsStatement(outboxMarkSentUpdate(table));
    const seen: Record<Encoding, { ms: number[]; cpuMs: number; bytes: number }> = { text: { ms: [], cpuMs: 0, bytes: 0 }, binary: { ms: [], cpuMs: 0, bytes: 0 } };
    for (let run = 0; run < (runs + 4) * 2; run++) {
      const encoding = ENCODINGS[run % 2]!;
      await client.query(`TRUNCATE ${table}`);
      await client.query(`INSERT INTO ${table} (topic, payload) SELECT 'bench', jsonb_build_object('n', n) FROM generate_series(1, $1) n`, [rows]);
      const claimed = await driver.outboxClaimMany({ limit: rows, leaseMs: 60_000 });
      if (claimed.length !== rows) throw new Error(`claimed ${claimed.length} of ${rows} rows`);
      const cpu = process.cpuUsage();
      const started = performance.now();
      const ids = claimed.map((r) => r.id);
      const tokens = claimed.map((r) => r.claimToken);
      const bind: unknown[] = encoding === 'text' ? [ids, tokens] : [binaryUuidArray(ids)!, binaryUuidArray(tokens)!];
      const { rows: notChanged } = await client.query(sentMark, bind);
      const ms = performance.now() - started;
      const used = process.cpuUsage(cpu);
      if (notChanged.length !== 0) throw new Error(`${notChanged.length} rows were not marked sent`);
      if (run < 8) continue;
      seen[encoding].ms.push(ms);
      seen[encoding].cpuMs += (used.user + used.system) / 1000;
      seen[encoding].bytes = encoding === 'text' ? literal(ids) + literal(tokens) : (bind[0] as Buffer).length + (bind[1] as Buffer).length;
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    console.log(`| ${rows.toLocaleString('en-US')} rows | median ms | client CPU ms | bind bytes |`);
    console.log('|---|--:|--:|--:|');
    for (const encoding of ENCODINGS) {
      const s = seen[encoding];
      console.log(`| ${encoding} | ${median(s.ms).toFixed(2)} | ${(s.cpuMs / s.ms.length).toFixed(3)} | ${s.bytes.toLocaleString('en-US')} |`);
    }
  } finally {
    await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`).then(forget, () => {});
    await client.end();
    await driver.close();
    await embedded?.stop();
  }
}

await main();
