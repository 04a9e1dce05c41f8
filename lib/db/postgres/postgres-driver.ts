/**
 * The PostgreSQL driver: wires the per-table query modules to the `Driver` interface.
 */
import type pg from 'pg';
import type { QueueBoxConfig } from '../../config/schema.ts';
import { QueueBoxError, SchemaMismatchError } from '../../errors.ts';
import { refusePool } from '../caller-transaction.ts';
import type { CallerTransaction, Driver, DriverLogger, MigrateResult } from '../driver.ts';
import * as consoleReads from './console-queries.ts';
import type { PgContext } from './context.ts';
import * as inbox from './inbox-queries.ts';
import { pgExpectedColumns, pgMigrations } from './migrations.ts';
import { pgNames, quoteIdent } from './names.ts';
import { installClaimFunctions, newClaimFunctionState, type ClaimStatement } from './claim-functions.ts';
import * as outbox from './outbox-queries.ts';
import { createPgPool, pgQuery, pgTransaction, type PgPool, type PgQueryable } from './pg-pool.ts';
import * as pull from './pull-queries.ts';
import { outboxReplayPreview } from './replay-preview.ts';

/** Accepts the caller's `pg` client (inside its own `BEGIN`). */
function asQueryable(tx: CallerTransaction): PgQueryable {
  refusePool(tx, 'a write in the caller transaction');
  if (typeof tx === 'object' && tx !== null && typeof (tx as PgQueryable).query === 'function') return tx as PgQueryable;
  throw new QueueBoxError('expected a pg client (pg.Client or pg.PoolClient) inside the caller transaction');
}

export interface PostgresDriverOptions {
  /** `outbox.batchSize` names the claim statements `migrate` creates functions for (default 100). */
  config: Pick<QueueBoxConfig, 'database' | 'tables'> & { outbox?: Pick<QueueBoxConfig['outbox'], 'batchSize'> };
  url: string;
  /** Use this pool instead of creating one (it is not ended by `close`). */
  pool?: PgPool;
}

/** `outbox.batchSize` when the driver's config has no `outbox` section (the config default). */
const DEFAULT_BATCH_SIZE = 100;

export class PostgresDriver implements Driver {
  readonly dialect = 'postgres' as const;
  readonly ctx: PgContext;
  readonly #ownsPool: boolean;
  readonly #outboxBatchSize: number;
  readonly #useClaimFunctions: boolean;

  constructor(options: PostgresDriverOptions) {
    const pool = options.pool ?? createPgPool(options.config.database, options.url);
    this.#ownsPool = options.pool === undefined;
    const prepared = options.config.database.preparedStatements;
    this.#useClaimFunctions = options.config.database.claimFunctions !== false;
    this.ctx = {
      pool,
      names: pgNames(options.config.database.schema ?? 'public', options.config.tables),
      prepared,
      // Named prepared statements already plan once per connection: no functions then.
      claimFunctions: prepared === true || !this.#useClaimFunctions ? undefined : newClaimFunctionState(),
    };
    this.#outboxBatchSize = options.config.outbox?.batchSize ?? DEFAULT_BATCH_SIZE;
  }

  /**
   * The claim statements this configuration sends, which `migrate` creates functions for (none
   * with `database.claimFunctions: false`).
   */
  claimStatements(): ClaimStatement[] {
    if (!this.#useClaimFunctions) return [];
    const outboxClaims = outbox.outboxClaimStatements(this.ctx.names, this.#outboxBatchSize);
    return [outboxClaims.window, outboxClaims.full];
  }

  get pool(): PgPool {
    return this.ctx.pool;
  }

  /** Claim functions found unusable are logged as warnings (once per finding; retried after `CLAIM_FUNCTION_RETRY_MS`). */
  useLogger(logger: DriverLogger): void {
    const state = this.ctx.claimFunctions;
    if (state === undefined) return;
    state.warn = (event) =>
      logger.warn('claim function unusable: claims send their statement until it is found usable again (run `queuebox migrate` after an upgrade or a change of outbox.batchSize)', { ...event });
  }

  async migrate(): Promise<MigrateResult> {
    const n = this.ctx.names;
    return pgTransaction(this.ctx.pool, async (client) => {
      // Transaction-scoped: released at COMMIT, safe behind a transaction pooler.
      await client.query(`SELECT pg_advisory_xact_lock(hashtext('queuebox.migrate'))`);
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(n.schema)}`);
      await client.query(
        `CREATE TABLE IF NOT EXISTS ${n.migrations} (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
      );
      const { rows } = await client.query<{ version: number }>(`SELECT version FROM ${n.migrations}`);
      const done = new Set(rows.map((r) => r.version));
      const applied: number[] = [];
      for (const migration of pgMigrations) {
        if (done.has(migration.version)) continue;
        await client.query(migration.sql(n));
        await client.query(`INSERT INTO ${n.migrations} (version, name) VALUES ($1, $2)`, [migration.version, migration.name]);
        applied.push(migration.version);
      }
      // Not numbered: the claim functions of this release and configuration (see claim-functions.ts).
      const claimFunctions = await installClaimFunctions(client, n, this.claimStatements());
      return { applied, claimFunctions };
    });
  }

  async schemaVerify(): Promise<void> {
    const n = this.ctx.names;
    const { rows } = await pgQuery<{ table_name: string; column_name: string }>(
      this.ctx.pool,
      `SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = ANY($2::text[])`,
      [n.schema, [n.outboxTable, n.inboxTable, n.maintenanceTable]],
    );
    const present = new Set(rows.map((r) => `${r.table_name}.${r.column_name}`));
    const tables = new Set(rows.map((r) => r.table_name));
    const statements: string[] = [];
    for (const table of pgExpectedColumns(n)) {
      if (!tables.has(table.table)) {
        statements.push(`-- table ${table.qualified} does not exist: run \`queuebox migrate\``);
        continue;
      }
      for (const column of table.columns) {
        if (!present.has(`${table.table}.${column.name}`)) {
          statements.push(`ALTER TABLE ${table.qualified} ADD COLUMN ${quoteIdent(column.name)} ${column.ddl};`);
        }
      }
    }
    if (statements.length > 0) throw new SchemaMismatchError(statements);
  }

  async clockNow(): Promise<Date> {
    const { rows } = await pgQuery<{ now: Date }>(this.ctx.pool, 'SELECT clock_timestamp() AS now');
    return rows[0]!.now;
  }

  async close(): Promise<void> {
    if (this.#ownsPool) await this.ctx.pool.end();
  }

  outboxInsert: Driver['outboxInsert'] = (tx, message, defaults) => outbox.outboxInsert(this.ctx.names, asQueryable(tx), message, defaults);
  outboxClaimMany: Driver['outboxClaimMany'] = (p) => outbox.outboxClaimMany(this.ctx, p);
  outboxRenewMany: Driver['outboxRenewMany'] = (p) => outbox.outboxRenewMany(this.ctx, p);
  outboxMarkSentMany: Driver['outboxMarkSentMany'] = (p) => outbox.outboxMarkSentMany(this.ctx, p);
  outboxRetryMany: Driver['outboxRetryMany'] = (p) => outbox.outboxRetryMany(this.ctx, p);
  outboxMarkDeadMany: Driver['outboxMarkDeadMany'] = (p) => outbox.outboxMarkDeadMany(this.ctx, p);
  outboxReclaimExpired: Driver['outboxReclaimExpired'] = (p) => outbox.outboxReclaimExpired(this.ctx, p);
  outboxStats: Driver['outboxStats'] = (scope) => outbox.outboxStats(this.ctx, scope);
  outboxDeadList: Driver['outboxDeadList'] = (p) => outbox.outboxDeadList(this.ctx, p);
  outboxReplay: Driver['outboxReplay'] = (f) => outbox.outboxReplay(this.ctx, f);
  outboxReplayPreview: Driver['outboxReplayPreview'] = (p) => outboxReplayPreview(this.ctx, p);
  outboxDeleteFinished: Driver['outboxDeleteFinished'] = (p) => outbox.outboxDeleteFinished(this.ctx, p);

  inboxInsert: Driver['inboxInsert'] = (m, tx) => inbox.inboxInsert(this.ctx, tx === undefined ? this.ctx.pool : asQueryable(tx), m);
  inboxClaimPushMany: Driver['inboxClaimPushMany'] = (p) => inbox.inboxClaimPushMany(this.ctx, p);
  inboxRenewMany: Driver['inboxRenewMany'] = (p) => inbox.inboxRenewMany(this.ctx, p);
  inboxForward: Driver['inboxForward'] = (item, defaults) => inbox.inboxForward(this.ctx, item, defaults);
  inboxForwardMany: Driver['inboxForwardMany'] = (items, defaults) => inbox.inboxForwardMany(this.ctx, items, defaults);
  inboxRetryMany: Driver['inboxRetryMany'] = (p) => inbox.inboxRetryMany(this.ctx, p);
  inboxMarkDeadMany: Driver['inboxMarkDeadMany'] = (p) => inbox.inboxMarkDeadMany(this.ctx, p);
  inboxReclaimExpired: Driver['inboxReclaimExpired'] = (p) => inbox.inboxReclaimExpired(this.ctx, p);
  inboxStats: Driver['inboxStats'] = (scope) => inbox.inboxStats(this.ctx, scope);
  inboxDeadList: Driver['inboxDeadList'] = (p) => inbox.inboxDeadList(this.ctx, p);
  inboxDeleteFinished: Driver['inboxDeleteFinished'] = (p) => inbox.inboxDeleteFinished(this.ctx, p);

  pullClaimMany: Driver['pullClaimMany'] = (p) => pull.pullClaimMany(this.ctx, p);
  pullRenew: Driver['pullRenew'] = (p) => pull.pullRenew(this.ctx, p);
  pullComplete: Driver['pullComplete'] = (tx, claim) => pull.pullComplete(this.ctx, asQueryable(tx), claim);
  pullRetry: Driver['pullRetry'] = (p) => pull.pullRetry(this.ctx, p);
  pullMarkDead: Driver['pullMarkDead'] = (p) => pull.pullMarkDead(this.ctx, p);
  pullRelease: Driver['pullRelease'] = (p) => pull.pullRelease(this.ctx, p);

  outboxStatsByState: Driver['outboxStatsByState'] = (p) => consoleReads.outboxStatsByState(this.ctx, p);
  outboxClaimsInFlight: Driver['outboxClaimsInFlight'] = (p) => consoleReads.outboxClaimsInFlight(this.ctx, p);
  outboxBlockedKeys: Driver['outboxBlockedKeys'] = (p) => consoleReads.outboxBlockedKeys(this.ctx, p);
  outboxDeadSearch: Driver['outboxDeadSearch'] = (q) => consoleReads.outboxDeadSearch(this.ctx, q);
  outboxRowGet: Driver['outboxRowGet'] = (p) => consoleReads.outboxRowGet(this.ctx, p);
  inboxStatsByState: Driver['inboxStatsByState'] = (p) => consoleReads.inboxStatsByState(this.ctx, p);
  inboxClaimsInFlight: Driver['inboxClaimsInFlight'] = (p) => consoleReads.inboxClaimsInFlight(this.ctx, p);
  inboxBlockedAggregates: Driver['inboxBlockedAggregates'] = (p) => consoleReads.inboxBlockedAggregates(this.ctx, p);
  inboxDeadSearch: Driver['inboxDeadSearch'] = (q) => consoleReads.inboxDeadSearch(this.ctx, q);
  inboxRowGet: Driver['inboxRowGet'] = (p) => consoleReads.inboxRowGet(this.ctx, p);
}

export type { pg };
