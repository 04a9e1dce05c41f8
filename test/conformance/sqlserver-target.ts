/**
 * The SQL Server conformance target: the driver on a fresh schema of `QUEUEBOX_MSSQL_URL`, plus
 * inspection in T-SQL. The schema and everything in it is dropped at the end.
 */
import { randomBytes } from 'node:crypto';
import sql from 'mssql';
import { parseConfig } from '../../lib/config/load-config.ts';
import { createMssqlPool, param, runBatch, runStatement } from '../../lib/db/sqlserver/mssql-pool.ts';
import { quoteMssqlIdent } from '../../lib/db/sqlserver/names.ts';
import { SqlServerDriver } from '../../lib/db/sqlserver/sqlserver-driver.ts';
import type { ConformanceTarget, InspectedRow } from './driver-conformance.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

const JSON_COLUMNS = new Set(['payload', 'headers']);
const UUID_COLUMNS = new Set(['id', 'claim_token']);

function normalize(row: Record<string, unknown>): InspectedRow {
  const out: Record<string, unknown> = {};
  for (const [column, value] of Object.entries(row)) {
    if (JSON_COLUMNS.has(column) && typeof value === 'string') out[column] = JSON.parse(value);
    else if (UUID_COLUMNS.has(column) && typeof value === 'string') out[column] = value.toLowerCase();
    else out[column] = value;
  }
  return out as InspectedRow;
}

export async function createSqlServerTarget(url: string): Promise<ConformanceTarget> {
  const schema = `qb_test_${randomBytes(5).toString('hex')}`;
  const config = parseConfig({ database: { type: 'sqlserver', url, schema } });
  const drivers: SqlServerDriver[] = [];
  const newDriver = (tables?: { outbox?: string; inbox?: string; maintenance?: string }) => {
    const driver = new SqlServerDriver({ config: { ...config, tables: { ...config.tables, ...tables } }, url });
    drivers.push(driver);
    return driver;
  };
  const driver = newDriver();
  await driver.migrate();
  // Inspection connections; replaced after a READ_COMMITTED_SNAPSHOT switch, which ends every other session.
  let pool = createMssqlPool(config.database, url);
  await pool.connect();
  const table = (name: 'outbox' | 'inbox') => `${quoteMssqlIdent(schema)}.${quoteMssqlIdent(config.tables[name])}`;
  return {
    driver,
    newDriver,
    async row(name, id) {
      const { recordset } = await runStatement<Record<string, unknown>>(pool, { text: `SELECT * FROM ${table(name)} WHERE id = @p_id;`, params: [param('p_id', sql.UniqueIdentifier, id)] });
      return recordset[0] ? normalize(recordset[0]) : undefined;
    },
    async count(name, state) {
      const { recordset } = await runStatement<{ n: number }>(pool, {
        text: `SELECT COUNT(*) AS n FROM ${table(name)} WHERE @p_state IS NULL OR state = @p_state;`,
        params: [param('p_state', sql.NVarChar(50), state ?? null)],
      });
      return recordset[0]!.n;
    },
    async setTime(name, id, column, msFromNow) {
      await runStatement(pool, {
        text: `UPDATE ${table(name)} SET ${quoteMssqlIdent(column)} = DATEADD(millisecond, @p_ms, SYSUTCDATETIME()) WHERE id = @p_id;`,
        params: [param('p_id', sql.UniqueIdentifier, id), param('p_ms', sql.Int, msFromNow)],
      });
    },
    async inTransaction(work, end) {
      const tx = new sql.Transaction(pool);
      await tx.begin(sql.ISOLATION_LEVEL.READ_COMMITTED);
      try {
        const result = await work(tx);
        await (end === 'commit' ? tx.commit() : tx.rollback());
        return result;
      } catch (error) {
        await tx.rollback().catch(() => {});
        throw error;
      }
    },
    async readCommittedSnapshot(on) {
      const { recordset } = await runStatement<{ rcsi: boolean }>(pool, { text: 'SELECT is_read_committed_snapshot_on AS rcsi FROM sys.databases WHERE database_id = DB_ID();', params: [] });
      const before = recordset[0]!.rcsi;
      if (before !== on) {
        // Switching needs the database to itself: other sessions (the drivers' pooled connections) are rolled back and closed.
        await runBatch(pool, `ALTER DATABASE CURRENT SET READ_COMMITTED_SNAPSHOT ${on ? 'ON' : 'OFF'} WITH ROLLBACK IMMEDIATE;`);
        await pool.close();
        pool = createMssqlPool(config.database, url);
        await pool.connect();
      }
      return before;
    },
    async lockEscalations(name) {
      const { recordset } = await runStatement<{ n: number | null }>(pool, {
        text: `SELECT SUM(index_lock_promotion_count) AS n FROM sys.dm_db_index_operational_stats(DB_ID(), OBJECT_ID(@p_table), NULL, NULL);`,
        params: [param('p_table', sql.NVarChar(300), table(name))],
      });
      return Number(recordset[0]?.n ?? 0);
    },
    async lockTable(name) {
      const tx = new sql.Transaction(pool);
      await tx.begin(sql.ISOLATION_LEVEL.READ_COMMITTED);
      await new sql.Request(tx).query(`SELECT TOP (1) 1 AS locked FROM ${table(name)} WITH (TABLOCKX, HOLDLOCK);`);
      return async () => {
        await tx.rollback();
      };
    },
    async reset() {
      await runBatch(pool, `DELETE FROM ${table('outbox')}; DELETE FROM ${table('inbox')}; DELETE FROM ${quoteMssqlIdent(schema)}.${quoteMssqlIdent(config.tables.maintenance)};`);
    },
    async close() {
      await Promise.all(drivers.map((d) => d.close().catch(() => {})));
      const { recordset } = await runStatement<{ name: string; type: string }>(pool, {
        text: `SELECT o.name, o.type FROM sys.objects o WHERE o.schema_id = SCHEMA_ID(@p_schema) AND o.type IN ('U', 'SO');`,
        params: [param('p_schema', sql.NVarChar(128), schema)],
      });
      const drops = [...recordset.filter((o) => o.type.trim() === 'U'), ...recordset.filter((o) => o.type.trim() === 'SO')]
        .map((o) => `DROP ${o.type.trim() === 'U' ? 'TABLE' : 'SEQUENCE'} ${quoteMssqlIdent(schema)}.${quoteMssqlIdent(o.name)};`)
        .join('\n');
      await runBatch(pool, `${drops}\nDROP SCHEMA ${quoteMssqlIdent(schema)};`);
      await pool.close();
    },
  };
}
