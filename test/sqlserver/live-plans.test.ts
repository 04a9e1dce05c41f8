/**
 * The outbox claim's actual execution plan on a live SQL Server at 1,000,000 waiting rows over
 * 10,000 keys: the oldest 100,000 rows are one hot key's, the other 900,000 are spread over all
 * 10,000 keys, so the oldest rows give one head and the claim must find the others by key (the
 * loose index scan, not a window of the oldest rows). Captured with `SET STATISTICS XML ON` on the
 * connection that runs the claim batch as QueueBox sends it, printed as a summary (one line per
 * operator on the outbox: statement, operator, index, rows, rows read, executions), and checked:
 * no table scan or clustered index scan of the outbox, no index scan reading more than the
 * number of keys, the key-head index sought, and at most 100,000 outbox rows read in all (the
 * claim's cost follows the keys, not the 1,000,000 rows behind them).
 *
 * Runs when `QUEUEBOX_MSSQL_URL` is set (a fresh schema, dropped afterwards; filling it takes a
 * few minutes); skipped with the reason otherwise. `npm run test:sqlserver` runs it on both
 * databases (READ_COMMITTED_SNAPSHOT ON and OFF).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import sql from 'mssql';
import { parseConfig } from '../../lib/config/load-config.ts';
import { buildOutboxClaim } from '../../lib/db/sqlserver/outbox-claim.ts';
import { createMssqlPool, statementText } from '../../lib/db/sqlserver/mssql-pool.ts';
import type { MssqlNames } from '../../lib/db/sqlserver/names.ts';
import type { SqlServerDriver } from '../../lib/db/sqlserver/sqlserver-driver.ts';
import { createSqlServerTarget } from '../conformance/sqlserver-target.ts';
import type { ConformanceTarget } from '../conformance/driver-conformance.ts';
import { formatAccesses, planAccesses, planProblems } from './showplan.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

const url = process.env.QUEUEBOX_MSSQL_URL;
const skip = url ? false : 'QUEUEBOX_MSSQL_URL is not set: no SQL Server on this machine (npm run test:sqlserver starts one in Docker)';

const ROWS = 1_000_000;
const KEYS = 10_000;
const CHUNK = 100_000;
/** The oldest rows, all of key `k-0`. */
const HOT = 100_000;
const LIMIT = 10;

describe('SQL Server outbox claim plan at 1,000,000 rows and 10,000 keys (live)', { timeout: 1_800_000 }, () => {
  let t: ConformanceTarget;
  let names: MssqlNames;
  let single: sql.ConnectionPool;

  before(async () => {
    if (!url) return;
    t = await createSqlServerTarget(url);
    names = (t.driver as SqlServerDriver).names;
    single = createMssqlPool(parseConfig({ database: { type: 'sqlserver', url, poolMax: 1, requestTimeoutMs: 600_000 } }).database, url);
    await single.connect();
  });
  after(async () => {
    await single?.close();
    await t?.close();
  });

  /**
   * Runs the batch with `SET STATISTICS XML ON` at its start (it applies to the statements after
   * it in the batch and ends with it); returns the showplan documents and the other result sets.
   */
  async function withActualPlans(statement: ReturnType<typeof buildOutboxClaim>): Promise<{ plans: string[]; results: Array<Array<Record<string, unknown>>> }> {
    const request = single.request();
    for (const p of statement.params) request.input(p.name, p.type, p.value);
    const { recordsets } = await request.query(`SET STATISTICS XML ON;\n${statementText(single, statement)}`);
    const plans: string[] = [];
    const results: Array<Array<Record<string, unknown>>> = [];
    for (const set of recordsets as unknown as Array<Array<Record<string, unknown>>>) {
      const columns = set[0] ? Object.keys(set[0]) : [];
      if (columns.length === 1 && /showplan/i.test(columns[0]!)) plans.push(String(set[0]![columns[0]!]));
      else results.push(set);
    }
    return { plans, results };
  }

  it('the claim seeks the key-head index, scans no table, and reads rows in proportion to the keys', { skip }, async (c) => {
    await t.reset();
    for (let from = 0; from < ROWS; from += CHUNK) {
      await single.request().batch(
        `INSERT INTO ${names.outbox} WITH (TABLOCK) (topic, [key], payload)
         SELECT N'plan', CONCAT(N'k-', CASE WHEN n < ${HOT} THEN 0 ELSE n % ${KEYS} END), CONCAT(N'{"n":', n, N'}')
           FROM (SELECT TOP (${CHUNK}) ${from} + ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) - 1 AS n
                   FROM sys.all_columns AS a CROSS JOIN sys.all_columns AS b) AS numbers
          ORDER BY n;`,
      );
    }
    await single.request().batch(`UPDATE STATISTICS ${names.outbox} WITH FULLSCAN;`);
    assert.equal(await t.count('outbox', 'pending'), ROWS);
    const { recordset: keyCount } = await single.request().query<{ n: number }>(`SELECT COUNT(DISTINCT [key]) AS n FROM ${names.outbox};`);
    assert.equal(keyCount[0]!.n, KEYS);

    const statement = buildOutboxClaim(names, { limit: LIMIT, leaseMs: 60_000 });
    const { plans, results } = await withActualPlans(statement);
    const claimed = results.at(-1) ?? [];
    assert.equal(claimed.length, LIMIT, 'the claim returned its batch');
    assert.equal(new Set(claimed.map((r) => r.key)).size, LIMIT, 'one head per key');
    assert.ok(plans.length > 0, 'SET STATISTICS XML ON returned actual plans');

    const accesses = planAccesses(plans);
    const summary = formatAccesses(accesses.filter((a) => a.table === names.outboxTable));
    for (const line of [`outbox claim, ${ROWS} pending rows over ${KEYS} keys (the oldest ${HOT} of one key), batch ${LIMIT}: operators on ${names.outboxTable}`, ...summary.split('\n')]) c.diagnostic(line);
    console.log(`# outbox claim plan (${ROWS} rows, ${KEYS} keys)\n${summary}`);

    assert.ok(
      accesses.some((a) => a.table === names.outboxTable && a.op === 'Index Seek' && a.index === `${names.outboxTable}_key_head_idx`),
      `the key-head index is sought:\n${summary}`,
    );
    assert.deepEqual(planProblems(accesses, { table: names.outboxTable, maxScanRowsRead: KEYS, maxTotalRowsRead: 100_000 }), [], `the plan:\n${summary}`);
  });
});
