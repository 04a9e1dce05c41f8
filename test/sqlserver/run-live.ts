/**
 * `npm run test:sqlserver`: the live SQL Server run, one command for anyone with Docker. Starts
 * SQL Server 2022 (or 2019: `--server 2019`) from `test/sqlserver/compose.yml`, creates two
 * databases (READ_COMMITTED_SNAPSHOT ON and OFF), runs `queuebox migrate` on each, then the
 * conformance suite and the live-only suites with `QUEUEBOX_MSSQL_URL` set, and removes the
 * container (`--keep` leaves it). With `QUEUEBOX_MSSQL_URL` already set it uses that server and
 * no Docker. `--help` lists the options; the steps are in `live-runner.ts`.
 */
import sql from 'mssql';
import { parseConfig } from '../../lib/config/load-config.ts';
import { createMssqlPool } from '../../lib/db/sqlserver/mssql-pool.ts';
import { quoteMssqlIdent } from '../../lib/db/sqlserver/names.ts';
import { dryRunner, execCommand, parseLiveArgs, runLive, type LiveRunner } from './live-runner.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

/** A pool of one connection to the URL's database, for the set-up statements. */
async function connect(url: string): Promise<sql.ConnectionPool> {
  const database = parseConfig({ database: { type: 'sqlserver', url, poolMax: 1 } }).database;
  const pool = createMssqlPool(database, url);
  await pool.connect();
  return pool;
}

async function withPool<T>(url: string, work: (pool: sql.ConnectionPool) => Promise<T>): Promise<T> {
  const pool = await connect(url);
  try {
    return await work(pool);
  } finally {
    await pool.close();
  }
}

const dropIfExists = (name: string) => {
  const q = quoteMssqlIdent(name);
  // SINGLE_USER … ROLLBACK IMMEDIATE ends the sessions a kept or interrupted earlier run left.
  return `IF DB_ID(N'${name}') IS NOT NULL BEGIN ALTER DATABASE ${q} SET SINGLE_USER WITH ROLLBACK IMMEDIATE; DROP DATABASE ${q}; END;`;
};

let interrupted = false;

const mssqlRunner: LiveRunner = {
  exec: execCommand,
  prepareDatabase: (url, name, rcsi) =>
    withPool(url, async (pool) => {
      const q = quoteMssqlIdent(name);
      await pool.request().batch(`${dropIfExists(name)}\nCREATE DATABASE ${q};`);
      await pool.request().batch(`ALTER DATABASE ${q} SET READ_COMMITTED_SNAPSHOT ${rcsi ? 'ON' : 'OFF'} WITH ROLLBACK IMMEDIATE;`);
      const { recordset } = await pool
        .request()
        .input('name', sql.NVarChar(128), name)
        .query<{ rcsi: boolean; version: string }>('SELECT is_read_committed_snapshot_on AS rcsi, @@VERSION AS version FROM sys.databases WHERE name = @name;');
      const row = recordset[0];
      if (row?.rcsi !== rcsi) throw new Error(`database ${name}: READ_COMMITTED_SNAPSHOT is ${row ? (row.rcsi ? 'ON' : 'OFF') : 'unknown (no such database)'} after setting it ${rcsi ? 'ON' : 'OFF'}`);
      return row.version;
    }),
  inspectDatabase: (url) =>
    withPool(url, async (pool) => {
      const { recordset } = await pool.request().query<{ rcsi: boolean; version: string }>('SELECT is_read_committed_snapshot_on AS rcsi, @@VERSION AS version FROM sys.databases WHERE database_id = DB_ID();');
      return recordset[0]!;
    }),
  dropDatabase: (url, name) =>
    withPool(url, async (pool) => {
      await pool.request().batch(dropIfExists(name));
    }),
  log: (line) => console.log(line),
  interrupted: () => interrupted,
};

const parsed = parseLiveArgs(process.argv.slice(2), process.env);
if (parsed.kind === 'help') {
  console.log(parsed.text);
  process.exit(0);
}
if (parsed.kind === 'error') {
  console.error(parsed.message);
  process.exit(2);
}
// Ctrl-C reaches the children (one process group); the run then removes the container as usual.
process.on('SIGINT', () => {
  interrupted = true;
  console.log('# interrupted: the current step stops, then the clean-up runs');
});
const code = await runLive(parsed.options, parsed.options.dryRun ? dryRunner((line) => console.log(line)) : mssqlRunner);
process.exit(code);
