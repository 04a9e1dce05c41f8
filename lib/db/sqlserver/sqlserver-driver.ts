/**
 * The SQL Server driver: wires the per-table query modules to the `Driver` interface.
 *
 * One `mssql` ConnectionPool per driver (create one driver per container), connected lazily.
 * The request timeout (≥ 30 s) stays above the 10 s claim-lock wait (spec §8).
 */
import type sql from 'mssql';
import { mssql } from './mssql-module.ts';
import type { QueueBoxConfig } from '../../config/schema.ts';
import { QueueBoxError, SchemaMismatchError } from '../../errors.ts';
import { isCallerExecutor } from '../caller-transaction.ts';
import type { CallerTransaction, Driver } from '../driver.ts';
import { sqlServerCallerPullComplete } from './caller-statements.ts';
import * as consoleReads from './console-queries.ts';
import * as inbox from './inbox-queries.ts';
import { inboxClaimPushMany } from './inbox-claim.ts';
import { inboxReplay, inboxReplayPreview } from './inbox-replay.ts';
import { outboxClaimMany } from './outbox-claim.ts';
import { assertCompatibilityLevel, COMPATIBILITY_LEVEL_SQL } from './compatibility-check.ts';
import { buildPassRecordFinished, passListFinished } from './maintenance-queries.ts';
import { MIGRATE_LOCK_SQL, migrationsTableSql, mssqlExpectedColumns, mssqlMigrations } from './migrations.ts';
import { createMssqlPool, ensureConnected, isMssqlTransaction, param, runBatch, runStatement, mssqlTransaction } from './mssql-pool.ts';
import { MSSQL_DEFAULT_SCHEMA, mssqlNames, quoteMssqlIdent, type MssqlNames } from './names.ts';
import * as outbox from './outbox-queries.ts';
import * as pull from './pull-queries.ts';
import * as scaleOut from './scale-out-queries.ts';
import { outboxReplayPreview } from './replay-preview.ts';

/** The request timeout of `migrate`'s transaction: none (tedious: 0 is no timeout). */
export const MIGRATE_REQUEST_TIMEOUT_MS = 0;

/** Accepts the caller's begun `mssql` Transaction. */
function asTransaction(tx: CallerTransaction): sql.Transaction {
  if (isMssqlTransaction(tx)) return tx;
  throw new QueueBoxError('expected an mssql Transaction (after begin()) as the caller transaction');
}

export interface SqlServerDriverOptions {
  config: Pick<QueueBoxConfig, 'database' | 'tables'>;
  url: string;
  /** Use this pool instead of creating one (it is not closed by `close`). */
  pool?: sql.ConnectionPool;
}

export class SqlServerDriver implements Driver {
  readonly dialect = 'sqlserver' as const;
  readonly names: MssqlNames;
  readonly #pool: sql.ConnectionPool;
  readonly #ownsPool: boolean;
  readonly #connection: { connecting?: Promise<unknown> } = {};

  constructor(options: SqlServerDriverOptions) {
    this.#pool = options.pool ?? createMssqlPool(options.config.database, options.url);
    this.#ownsPool = options.pool === undefined;
    this.names = mssqlNames(options.config.database.schema ?? MSSQL_DEFAULT_SCHEMA, options.config.tables);
  }

  /** The connected pool. */
  async pool(): Promise<sql.ConnectionPool> {
    await ensureConnected(this.#pool, this.#connection);
    return this.#pool;
  }

  /**
   * Applies the migrations not yet recorded, in one transaction under the migrate lock. Its
   * requests have no timeout (`MIGRATE_REQUEST_TIMEOUT_MS`): an index build on a large table
   * takes longer than the pool's request timeout, and a timeout would roll every migration back.
   */
  async migrate(): Promise<{ applied: number[] }> {
    const n = this.names;
    const applied = await mssqlTransaction(await this.pool(), async (tx) => {
      const { recordset: levels } = await runStatement<{ level: number }>(tx, { text: COMPATIBILITY_LEVEL_SQL, params: [] });
      assertCompatibilityLevel(levels[0]?.level);
      await runBatch(tx, MIGRATE_LOCK_SQL);
      for (const statement of migrationsTableSql(n)) await runBatch(tx, statement);
      const { recordset } = await runStatement<{ version: number }>(tx, { text: `SELECT version FROM ${n.migrations};`, params: [] });
      const done = new Set(recordset.map((r) => r.version));
      const versions: number[] = [];
      for (const migration of mssqlMigrations) {
        if (done.has(migration.version)) continue;
        for (const statement of migration.statements(n)) await runBatch(tx, statement);
        await runStatement(tx, {
          text: `INSERT INTO ${n.migrations} (version, name) VALUES (@p_version, @p_name);`,
          params: [param('p_version', mssql().Int, migration.version), param('p_name', mssql().NVarChar(255), migration.name)],
        });
        versions.push(migration.version);
      }
      return versions;
    }, { requestTimeout: MIGRATE_REQUEST_TIMEOUT_MS });
    return { applied };
  }

  /** Numbered migrations not recorded, then what `schemaVerify` finds (missing columns, level). */
  async migrateCheck(): Promise<string[]> {
    const n = this.names;
    const { recordset } = await runStatement<{ version: number }>(await this.pool(), {
      text: `IF OBJECT_ID(N'${n.migrations}', N'U') IS NOT NULL SELECT version FROM ${n.migrations} ELSE SELECT CAST(NULL AS INT) AS version WHERE 1 = 0;`,
      params: [],
    });
    const done = new Set(recordset.map((r) => r.version));
    const problems = mssqlMigrations.filter((m) => !done.has(m.version)).map((m) => `migration ${m.version} (${m.name}) is not applied`);
    try {
      await this.schemaVerify();
    } catch (error) {
      if (!(error instanceof SchemaMismatchError)) throw error;
      problems.push(...error.statements.map((s) => (s.startsWith('-- ') ? s.slice(3) : `a column is missing: ${s}`)));
    }
    return problems;
  }

  async schemaVerify(): Promise<void> {
    const n = this.names;
    const { recordsets } = await runStatement<{ table_name: string; column_name: string }>(await this.pool(), {
      text: `SELECT TABLE_NAME AS table_name, COLUMN_NAME AS column_name FROM INFORMATION_SCHEMA.COLUMNS
 WHERE TABLE_SCHEMA = @p_schema AND TABLE_NAME IN (@p_outbox, @p_inbox, @p_maintenance);
${COMPATIBILITY_LEVEL_SQL}`,
      params: [
        param('p_schema', mssql().NVarChar(128), n.schema),
        param('p_outbox', mssql().NVarChar(128), n.outboxTable),
        param('p_inbox', mssql().NVarChar(128), n.inboxTable),
        param('p_maintenance', mssql().NVarChar(128), n.maintenanceTable),
      ],
    });
    const [columns = [], levels = []] = recordsets as unknown as [Array<{ table_name: string; column_name: string }>?, Array<{ level: number }>?];
    assertCompatibilityLevel(levels[0]?.level);
    const recordset = columns;
    const present = new Set(recordset.map((r) => `${r.table_name}.${r.column_name}`));
    const tables = new Set(recordset.map((r) => r.table_name));
    const statements: string[] = [];
    for (const table of mssqlExpectedColumns(n)) {
      if (!tables.has(table.table)) {
        statements.push(`-- table ${table.qualified} does not exist: run \`queuebox migrate\``);
        continue;
      }
      for (const column of table.columns) {
        if (!present.has(`${table.table}.${column.name}`)) statements.push(`ALTER TABLE ${table.qualified} ADD ${quoteMssqlIdent(column.name)} ${column.ddl};`);
      }
    }
    if (statements.length > 0) throw new SchemaMismatchError(statements);
  }

  async clockNow(): Promise<Date> {
    const { recordset } = await runStatement<{ now: Date }>(await this.pool(), { text: 'SELECT SYSUTCDATETIME() AS now;', params: [] });
    return recordset[0]!.now;
  }

  async close(): Promise<void> {
    if (this.#ownsPool && (this.#pool.connected || this.#pool.connecting)) await this.#pool.close();
  }

  outboxInsert: Driver['outboxInsert'] = (tx, message, defaults) => outbox.outboxInsert(this.names, asTransaction(tx), message, defaults);
  outboxClaimMany: Driver['outboxClaimMany'] = async (p) => outboxClaimMany(await this.pool(), this.names, p);
  outboxRenewMany: Driver['outboxRenewMany'] = async (p) => outbox.outboxRenewMany(await this.pool(), this.names, p);
  outboxMarkSentMany: Driver['outboxMarkSentMany'] = async (p) => outbox.outboxMarkSentMany(await this.pool(), this.names, p);
  outboxRetryMany: Driver['outboxRetryMany'] = async (p) => outbox.outboxRetryMany(await this.pool(), this.names, p);
  outboxMarkDeadMany: Driver['outboxMarkDeadMany'] = async (p) => outbox.outboxMarkDeadMany(await this.pool(), this.names, p);
  outboxReleaseMany: NonNullable<Driver['outboxReleaseMany']> = async (p) => outbox.outboxReleaseMany(await this.pool(), this.names, p);
  outboxReclaimExpired: Driver['outboxReclaimExpired'] = async (p) => outbox.outboxReclaimExpired(await this.pool(), this.names, p);
  outboxStats: Driver['outboxStats'] = async (scope) => outbox.outboxStats(await this.pool(), this.names, scope);
  outboxDeadList: Driver['outboxDeadList'] = async (p) => outbox.outboxDeadList(await this.pool(), this.names, p);
  outboxReplay: Driver['outboxReplay'] = async (f) => outbox.outboxReplay(await this.pool(), this.names, f);
  outboxReplayPreview: Driver['outboxReplayPreview'] = async (p) => outboxReplayPreview(await this.pool(), this.names, p);
  outboxDeleteFinished: Driver['outboxDeleteFinished'] = async (p) => outbox.outboxDeleteFinished(await this.pool(), this.names, p);

  inboxInsert: Driver['inboxInsert'] = async (m, tx) => inbox.inboxInsert(tx === undefined ? await this.pool() : asTransaction(tx), this.names, m);
  inboxClaimPushMany: Driver['inboxClaimPushMany'] = async (p) => inboxClaimPushMany(await this.pool(), this.names, p);
  inboxRenewMany: Driver['inboxRenewMany'] = async (p) => inbox.inboxRenewMany(await this.pool(), this.names, p);
  inboxForward: Driver['inboxForward'] = async (item, defaults) => inbox.inboxForward(await this.pool(), this.names, item, defaults);
  // No inboxForwardMany: the relay forwards row by row here (no SQL Server was available to prove a batched form).
  inboxRetryMany: Driver['inboxRetryMany'] = async (p) => inbox.inboxRetryMany(await this.pool(), this.names, p);
  inboxMarkDeadMany: Driver['inboxMarkDeadMany'] = async (p) => inbox.inboxMarkDeadMany(await this.pool(), this.names, p);
  inboxReleaseMany: NonNullable<Driver['inboxReleaseMany']> = async (p) => inbox.inboxReleaseMany(await this.pool(), this.names, p);
  inboxReclaimExpired: Driver['inboxReclaimExpired'] = async (p) => inbox.inboxReclaimExpired(await this.pool(), this.names, p);
  inboxStats: Driver['inboxStats'] = async (scope) => inbox.inboxStats(await this.pool(), this.names, scope);
  inboxDeadList: Driver['inboxDeadList'] = async (p) => inbox.inboxDeadList(await this.pool(), this.names, p);
  inboxDeleteFinished: Driver['inboxDeleteFinished'] = async (p) => inbox.inboxDeleteFinished(await this.pool(), this.names, p);
  inboxReplay: Driver['inboxReplay'] = async (f) => inboxReplay(await this.pool(), this.names, f);
  inboxReplayPreview: Driver['inboxReplayPreview'] = async (p) => inboxReplayPreview(await this.pool(), this.names, p);

  passRecordFinished: Driver['passRecordFinished'] = async (p) => {
    await runStatement(await this.pool(), buildPassRecordFinished(this.names, p.worker));
  };
  passListFinished: Driver['passListFinished'] = async () => passListFinished(await this.pool(), this.names);

  outboxCountDue: Driver['outboxCountDue'] = async (p) => scaleOut.runCountDue(await this.pool(), scaleOut.buildCountDue(this.names.outbox, p.limit));
  inboxCountDue: Driver['inboxCountDue'] = async (p) => scaleOut.runCountDue(await this.pool(), scaleOut.buildCountDue(this.names.inbox, p.limit, ` AND consumption = N'push'`));
  scaleOutAcquire: Driver['scaleOutAcquire'] = async (p) => scaleOut.scaleOutAcquire(await this.pool(), this.names, p);
  scaleOutStart: Driver['scaleOutStart'] = async (p) => scaleOut.scaleOutStart(await this.pool(), this.names, p);
  scaleOutRelease: Driver['scaleOutRelease'] = async (p) => scaleOut.scaleOutRelease(await this.pool(), this.names, p);

  pullClaimMany: Driver['pullClaimMany'] = async (p) => pull.pullClaimMany(await this.pool(), this.names, p);
  pullRenew: Driver['pullRenew'] = async (p) => pull.pullRenew(await this.pool(), this.names, p);
  pullComplete: Driver['pullComplete'] = async (tx, claim) => {
    if (!isCallerExecutor(tx)) return pull.pullComplete(asTransaction(tx), this.names, claim);
    const { text, values } = sqlServerCallerPullComplete(this.names, claim);
    return (await tx.query(text, values)).rows.length === 1;
  };
  pullRetry: Driver['pullRetry'] = async (p) => pull.pullRetry(await this.pool(), this.names, p);
  pullMarkDead: Driver['pullMarkDead'] = async (p) => pull.pullMarkDead(await this.pool(), this.names, p);
  pullRelease: Driver['pullRelease'] = async (c) => pull.pullRelease(await this.pool(), this.names, c);

  outboxStatsByState: Driver['outboxStatsByState'] = async (p) => consoleReads.outboxStatsByState(await this.pool(), this.names, p);
  outboxClaimsInFlight: Driver['outboxClaimsInFlight'] = async (p) => consoleReads.outboxClaimsInFlight(await this.pool(), this.names, p);
  outboxBlockedKeys: Driver['outboxBlockedKeys'] = async (p) => consoleReads.outboxBlockedKeys(await this.pool(), this.names, p);
  outboxDeadSearch: Driver['outboxDeadSearch'] = async (q) => consoleReads.outboxDeadSearch(await this.pool(), this.names, q);
  outboxDeadGroups: Driver['outboxDeadGroups'] = async (q) => consoleReads.outboxDeadGroups(await this.pool(), this.names, q);
  outboxRowGet: Driver['outboxRowGet'] = async (p) => consoleReads.outboxRowGet(await this.pool(), this.names, p);
  inboxStatsByState: Driver['inboxStatsByState'] = async (p) => consoleReads.inboxStatsByState(await this.pool(), this.names, p);
  inboxClaimsInFlight: Driver['inboxClaimsInFlight'] = async (p) => consoleReads.inboxClaimsInFlight(await this.pool(), this.names, p);
  inboxBlockedAggregates: Driver['inboxBlockedAggregates'] = async (p) => consoleReads.inboxBlockedAggregates(await this.pool(), this.names, p);
  inboxDeadSearch: Driver['inboxDeadSearch'] = async (q) => consoleReads.inboxDeadSearch(await this.pool(), this.names, q);
  inboxDeadGroups: Driver['inboxDeadGroups'] = async (q) => consoleReads.inboxDeadGroups(await this.pool(), this.names, q);
  inboxRowGet: Driver['inboxRowGet'] = async (p) => consoleReads.inboxRowGet(await this.pool(), this.names, p);
}
