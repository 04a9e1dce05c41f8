/**
 * The PostgreSQL driver: wires the per-table query modules to the `Driver` interface.
 */
import type pg from 'pg';
import { outboxRowsPerKey, type QueueBoxConfig } from '../../config/schema.ts';
import { QueueBoxError, SchemaMismatchError, SchemaTrustError, TransientDatabaseError } from '../../errors.ts';
import { refusePool } from '../caller-transaction.ts';
import type { CallerTransaction, Driver, DriverLogger, MigrateResult } from '../driver.ts';
import * as consoleReads from './console-queries.ts';
import type { PgContext } from './context.ts';
import * as inbox from './inbox-queries.ts';
import { inboxReplay, inboxReplayPreview } from './inbox-replay.ts';
import { passListFinished, passRecordFinished } from './maintenance-queries.ts';
import { epochMs, epochTime, type EpochMs } from './epoch-time.ts';
import { pgMigrations } from './migrations.ts';
import { pgNames, quoteIdent, type PgNames } from './names.ts';
import { claimFunctionName, newClaimFunctionState, type ClaimFunctionVerdict, type ClaimStatement } from './claim-functions.ts';
import { checkClaimFunctions, installClaimFunctions } from './claim-function-install.ts';
import { missingColumns, pgIndexNameTakenProblems, pgInvalidIndexProblems, pgMigrateCheck, pgTableSetProblem } from './migration-check.ts';
import { pgForeignTableProblems, pgForeignTableProblemsBeforeMigration } from './foreign-tables.ts';
import { PG_MIGRATE_LOCK_SQL, PG_SCHEMA_EXISTS_SQL, pgMigrationsTableSql } from './migration-script.ts';
import { pathBeforeCatalogProblem, pgPathBeforeCatalog, pgRequireUtf8, pgSchemaTrustProblems } from './schema-trust.ts';
import * as outbox from './outbox-queries.ts';
import { createPgPool, pgQuery, pgSetTransactionTimeout, poolStatementTimeoutMs, pgSimpleQuery, pgTransaction, type PgPool, type PgQueryable } from './pg-pool.ts';
import * as pull from './pull-queries.ts';
import * as scaleOut from './scale-out-queries.ts';
import { outboxReplayPreview } from './replay-preview.ts';

/** Accepts the caller's `pg` client (inside its own `BEGIN`). */
function asQueryable(tx: CallerTransaction): PgQueryable {
  refusePool(tx, 'a write in the caller transaction');
  if (typeof tx === 'object' && tx !== null && typeof (tx as PgQueryable).query === 'function') return tx as PgQueryable;
  throw new QueueBoxError('expected a pg client (pg.Client or pg.PoolClient) inside the caller transaction');
}

export interface PostgresDriverOptions {
  /** `outbox.batchSize` and `outbox.rowsPerKey` name the claim statements `migrate` creates functions for (default 100, `outboxRowsPerKey`). */
  config: Pick<QueueBoxConfig, 'database' | 'tables'> & { outbox?: Pick<QueueBoxConfig['outbox'], 'batchSize'> & Partial<Pick<QueueBoxConfig['outbox'], 'rowsPerKey'>> };
  url: string;
  /** Use this pool instead of creating one (it is not ended by `close`). */
  pool?: PgPool;
  /**
   * Run the start-up check (`schemaVerify`) before the first claim, unless `schemaVerify` already
   * passed: what `createDriver` and a pull worker built on a pool ask for, so that an application's
   * own claims refuse what QueueBox's functions refuse at start-up. Default: not.
   */
  verifyBeforeClaims?: boolean;
}

/** `outbox.batchSize` when the driver's config has no `outbox` section (the config default). */
const DEFAULT_BATCH_SIZE = 100;

export class PostgresDriver implements Driver {
  readonly dialect = 'postgres' as const;
  readonly ctx: PgContext;
  readonly #ownsPool: boolean;
  readonly #outboxBatchSize: number;
  readonly #outboxRowsPerKey: number;
  readonly #useClaimFunctions: boolean;
  readonly #verifyBeforeClaims: boolean;
  /** The start-up check under way (`#afterStartUpCheck`); cleared when it fails, so the next claim runs it again. */
  #verifying: Promise<void> | undefined;
  /** Set once `schemaVerify` passed: claims no longer wait for the start-up check. */
  #verified = false;

  constructor(options: PostgresDriverOptions) {
    const pool = options.pool ?? createPgPool(options.config.database, options.url);
    this.#ownsPool = options.pool === undefined;
    const prepared = options.config.database.preparedStatements;
    this.#useClaimFunctions = options.config.database.claimFunctions !== false;
    this.#verifyBeforeClaims = options.verifyBeforeClaims === true;
    this.ctx = {
      pool,
      names: pgNames(options.config.database.schema ?? 'public', options.config.tables),
      prepared,
      // Named prepared statements already plan once per connection: no functions then.
      claimFunctions: prepared === true || !this.#useClaimFunctions ? undefined : newClaimFunctionState({ verify: (statement) => this.#verifyClaimFunction(statement) }),
    };
    this.#outboxBatchSize = options.config.outbox?.batchSize ?? DEFAULT_BATCH_SIZE;
    this.ctx.claimFunctionLimit = this.#outboxBatchSize;
    this.#outboxRowsPerKey = outboxRowsPerKey(options.config);
  }

  /**
   * The claim statements this configuration sends, which `migrate` creates functions for (none
   * with `database.claimFunctions: false`).
   */
  claimStatements(): ClaimStatement[] {
    return pgClaimStatements(this.ctx.names, { claimFunctions: this.#useClaimFunctions, batchSize: this.#outboxBatchSize, rowsPerKey: this.#outboxRowsPerKey });
  }

  /**
   * Before a claim first calls a function (per container, and again after any failure): the
   * schema is closed to other roles and the function is QueueBox's own. Two catalog reads.
   */
  async #verifyClaimFunction(statement: ClaimStatement): Promise<ClaimFunctionVerdict> {
    const problems = await pgSchemaTrustProblems(this.ctx.pool, this.ctx.names);
    if (problems.length > 0) return { status: 'schema', detail: problems.join('; ') };
    return (await checkClaimFunctions(this.ctx.pool, this.ctx.names, [statement]))[0]!;
  }

  get pool(): PgPool {
    return this.ctx.pool;
  }

  /**
   * `claim()`, after the start-up check when the driver was asked to run it (`verifyBeforeClaims`)
   * and it has not passed yet: once, shared by the claims that come while it runs. A failure
   * (`SchemaTrustError`, the encoding, a missing column, or the database not answering) rejects
   * those claims and is not remembered: the next claim runs the check again.
   */
  #afterStartUpCheck<T>(claim: () => Promise<T>): Promise<T> {
    if (!this.#verifyBeforeClaims || this.#verified) return claim();
    this.#verifying ??= this.schemaVerify().catch((error: unknown) => {
      this.#verifying = undefined;
      throw error;
    });
    return this.#verifying.then(claim);
  }

  /** Claim functions found unusable are logged as warnings (once per finding; retried after `CLAIM_FUNCTION_RETRY_MS`). */
  useLogger(logger: DriverLogger): void {
    const state = this.ctx.claimFunctions;
    if (state === undefined) return;
    state.warn = (event) =>
      logger.warn(
        ['foreign', 'altered', 'schema'].includes(event.code)
          ? 'claim function refused: it is not QueueBox\'s own (or the schema is open to other roles), so it is not called and claims send their statement'
          : 'claim function unusable: claims send their statement until it is found usable again (run `queuebox migrate` after an upgrade or a change of outbox.batchSize)',
        { ...event },
      );
  }

  /**
   * Applies the numbered migrations not yet recorded, then the claim functions. Refuses
   * (`QueueBoxError`, nothing changed) a database whose encoding is not UTF8; refuses
   * (`SchemaTrustError`, nothing changed) a schema other roles may create in, and objects of
   * QueueBox's names that another role owns (`schema-trust.ts`); refuses (`QueueBoxError`, nothing
   * changed) a schema whose bookkeeping records another table set's migrations, a relation of a
   * table's name that is not QueueBox's table (`foreign-tables.ts`), the name of an index of a
   * migration held by another table's index or another relation, and an index of a migration
   * left invalid (`migration-check.ts`).
   */
  async migrate(): Promise<MigrateResult> {
    // The pool's statement timeout (`database.statementTimeoutMs` on QueueBox's own pool) bounds its lock waits.
    const lockWaitMs = poolStatementTimeoutMs(this.ctx.pool);
    try {
      return await this.#migrate(lockWaitMs);
    } catch (error) {
      if (error instanceof TransientDatabaseError && error.code === '55P03') {
        throw new TransientDatabaseError(
          `migrate: a lock it needs was not granted within ${lockWaitMs} ms (database.statementTimeoutMs): another migrate (one stopped with Ctrl-C may still run on the server: see pg_stat_activity), or a transaction on the QueueBox tables, holds it; nothing was changed, run migrate again once it has ended (${error.message})`,
          error.code,
          { cause: error },
        );
      }
      throw error;
    }
  }

  async #migrate(lockWaitMs: number): Promise<MigrateResult> {
    const n = this.ctx.names;
    const statements = this.claimStatements();
    return pgTransaction(this.ctx.pool, async (client) => {
      // A migration may build an index or rewrite rows of a large table (migration 8 updates
      // every unfinished outbox row): its statements run without the pool's statement timeout,
      // bounded only inside an invocation (the migrate function), each by the time left when it
      // is sent (`pgSetTransactionTimeout`; a migration of several statements: each of them). A
      // lock it waits for is bounded by `database.statementTimeoutMs`: a DDL statement queued for
      // its lock makes every later statement on the table queue behind it, so a migrate behind a
      // long transaction (or another migrate) gives up instead of stalling the pollers for longer.
      // Before anything is created: a database that is not UTF8 would take the schema and then
      // fail on a statement whose text or values it cannot hold, or store bodies it garbles.
      // First of all: with a schema before pg_catalog on the search_path, even the checks below
      // could call another role's functions.
      const before = await pgPathBeforeCatalog(client);
      if (before.length > 0) throw new SchemaTrustError(n.schema, [pathBeforeCatalogProblem(before)]);
      await pgRequireUtf8(client, 'migrate refused, nothing changed');
      await pgSetTransactionTimeout(client, `SET LOCAL lock_timeout = ${Number.isFinite(lockWaitMs) ? lockWaitMs : 0}`);
      // Transaction-scoped: released at COMMIT, safe behind a transaction pooler.
      await pgSimpleQuery(client, PG_MIGRATE_LOCK_SQL);
      // Only when missing: `CREATE SCHEMA IF NOT EXISTS` checks CREATE on the database before it
      // looks for the schema, which the schema's owner (docs/security.md) usually lacks.
      const { rows: schema } = await pgQuery<{ found: boolean }>(client, PG_SCHEMA_EXISTS_SQL, [n.schema]);
      if (!schema[0]!.found) await pgSimpleQuery(client, `CREATE SCHEMA IF NOT EXISTS ${quoteIdent(n.schema)}`);
      const problems = await pgSchemaTrustProblems(client, n, statements.map(claimFunctionName));
      if (problems.length > 0) throw new SchemaTrustError(n.schema, problems);
      await pgSimpleQuery(client, pgMigrationsTableSql(n));
      const { rows } = await pgQuery<{ version: number }>(client, `SELECT version FROM ${n.migrations}`);
      const done = new Set(rows.map((r) => r.version));
      // The bookkeeping is the schema's, by version only: versions recorded while this
      // configuration's tables do not exist are another table set's, and applying none of them
      // would leave this configuration without tables, asking for `migrate` for ever.
      const otherSet = done.size > 0 ? await pgTableSetProblem(client, n) : undefined;
      if (otherSet !== undefined) throw new QueueBoxError(`migrate refused, nothing changed: ${otherSet}`);
      // A relation of a table's name that migration 1 would skip and then fail on (an application's own `outbox`).
      const foreign = done.has(1) ? [] : await pgForeignTableProblems(client, n);
      if (foreign.length > 0) throw new QueueBoxError(`migrate refused, nothing changed:\n${foreign.map((p) => `- ${p}`).join('\n')}`);
      // `CREATE INDEX IF NOT EXISTS` skips an index whose name another table's index (or another
      // relation) holds, leaving its table without it (see INDEX_NAME_TAKEN_SQL); one a recorded
      // migration skipped is refused too, with the `CREATE INDEX` to run once the name is free.
      const taken = await pgIndexNameTakenProblems(client, n, done);
      if (taken.length > 0) throw new QueueBoxError(`migrate refused, nothing changed:\n${taken.map((p) => `- ${p}`).join('\n')}`);
      // `CREATE INDEX IF NOT EXISTS` would take an invalid index (a failed concurrent build) for
      // built; migrate refuses instead of rebuilding it the blocking way (see INVALID_INDEX_SQL).
      const invalid = await pgInvalidIndexProblems(client, n);
      if (invalid.length > 0) throw new QueueBoxError(`migrate refused, nothing changed:\n${invalid.map((p) => `- ${p}`).join('\n')}`);
      const applied: number[] = [];
      for (const migration of pgMigrations) {
        if (done.has(migration.version)) continue;
        await pgSimpleQuery(client, migration.sql(n));
        await pgQuery(client, `INSERT INTO ${n.migrations} (version, name) VALUES ($1, $2)`, [migration.version, migration.name]);
        applied.push(migration.version);
      }
      // Not numbered: the claim functions of this release and configuration (see claim-functions.ts).
      const claimFunctions = await installClaimFunctions(client, n, statements);
      return { applied, claimFunctions };
    });
  }

  /**
   * What `migrate` would still change, one line each (none: up to date); changes nothing. A
   * relation in the way of a table migration 1 creates (`pgForeignTableProblems`) is that line (and
   * the trust problems): `migrate` refuses it, so the rest would only ask for `migrate` again.
   */
  async migrateCheck(): Promise<string[]> {
    const statements = this.claimStatements();
    const problems = await pgMigrateCheck(this.ctx.pool, this.ctx.names, statements, this.#outboxBatchSize);
    if (problems.length === 0) return problems;
    const foreign = await pgForeignTableProblemsBeforeMigration(this.ctx.pool, this.ctx.names);
    if (foreign.length === 0) return problems;
    return [...(await pgSchemaTrustProblems(this.ctx.pool, this.ctx.names, statements.map(claimFunctionName))), ...foreign];
  }

  /**
   * Start-up check (once per container): refuses a database whose encoding is not UTF8
   * (`QueueBoxError`: `serverEncodingProblem`), a schema other roles may create in, or with
   * row-level security on a QueueBox table (`SchemaTrustError`), and a relation in the way of a table `migrate` has not created yet
   * (`QueueBoxError`: `pgForeignTableProblems`), then throws `SchemaMismatchError` with the DDL of missing columns. A
   * table missing while the schema's bookkeeping records migrations adds the line that says
   * `migrate` would not create it (another table set's migrations: `pgTableSetProblem`).
   */
  async schemaVerify(): Promise<void> {
    const n = this.ctx.names;
    // First: on a database of another encoding a statement with a character it cannot hold fails
    // with a raw conversion error, and on SQL_ASCII nothing fails until data goes wrong.
    await pgRequireUtf8(this.ctx.pool);
    const problems = await pgSchemaTrustProblems(this.ctx.pool, n);
    if (problems.length > 0) throw new SchemaTrustError(n.schema, problems);
    const statements = await missingColumns(this.ctx.pool, n);
    if (statements.length === 0) {
      this.#verified = true;
      return;
    }
    // Only on the failure path: a relation in the way of a table (`migrate` would refuse it, so
    // "run migrate" would loop).
    const foreign = await pgForeignTableProblemsBeforeMigration(this.ctx.pool, n);
    if (foreign.length > 0) throw new QueueBoxError(`a relation is in the way of a QueueBox table, which \`queuebox migrate\` therefore refuses to create:\n${foreign.map((p) => `- ${p}`).join('\n')}`);
    // Only on the failure path: two more catalog reads when a table is missing. Without this
    // line the error says "run migrate", which would change nothing.
    if (statements.some((s) => s.startsWith('-- table '))) {
      const { rows } = await pgQuery<{ found: boolean }>(this.ctx.pool, `SELECT to_regclass($1) IS NOT NULL AS found`, [n.migrations]);
      const otherSet = rows[0]!.found ? await pgTableSetProblem(this.ctx.pool, n) : undefined;
      if (otherSet !== undefined) statements.push(`-- ${otherSet}`);
    }
    throw new SchemaMismatchError(statements);
  }

  async clockNow(): Promise<Date> {
    const { rows } = await pgQuery<{ now_ms: EpochMs }>(this.ctx.pool, `SELECT ${epochMs('pg_catalog.clock_timestamp()')} AS now_ms`);
    return epochTime(rows[0]!.now_ms);
  }

  async close(): Promise<void> {
    if (this.#ownsPool) await this.ctx.pool.end();
  }

  outboxInsert: Driver['outboxInsert'] = (tx, message, defaults) => outbox.outboxInsert(this.ctx.names, asQueryable(tx), message, defaults);
  /** Without `rowsPerKey`: the configuration's `outbox.rowsPerKey` (the claims `migrate` made functions for). */
  outboxClaimMany: Driver['outboxClaimMany'] = (p) => this.#afterStartUpCheck(() => outbox.outboxClaimMany(this.ctx, { ...p, rowsPerKey: p.rowsPerKey ?? this.#outboxRowsPerKey }));
  outboxRenewMany: Driver['outboxRenewMany'] = (p) => outbox.outboxRenewMany(this.ctx, p);
  outboxMarkSentMany: Driver['outboxMarkSentMany'] = (p) => outbox.outboxMarkSentMany(this.ctx, p);
  outboxRetryMany: Driver['outboxRetryMany'] = (p) => outbox.outboxRetryMany(this.ctx, p);
  outboxMarkDeadMany: Driver['outboxMarkDeadMany'] = (p) => outbox.outboxMarkDeadMany(this.ctx, p);
  outboxReleaseMany: NonNullable<Driver['outboxReleaseMany']> = (p) => outbox.outboxReleaseMany(this.ctx, p);
  outboxReclaimExpired: Driver['outboxReclaimExpired'] = (p) => outbox.outboxReclaimExpired(this.ctx, p);
  outboxStats: Driver['outboxStats'] = (scope) => outbox.outboxStats(this.ctx, scope);
  outboxDeadList: Driver['outboxDeadList'] = (p) => outbox.outboxDeadList(this.ctx, p);
  outboxReplay: Driver['outboxReplay'] = (f) => outbox.outboxReplay(this.ctx, f);
  outboxReplayPreview: Driver['outboxReplayPreview'] = (p) => outboxReplayPreview(this.ctx, p);
  outboxDeleteFinished: Driver['outboxDeleteFinished'] = (p) => outbox.outboxDeleteFinished(this.ctx, p);

  inboxInsert: Driver['inboxInsert'] = (m, tx) => inbox.inboxInsert(this.ctx, tx === undefined ? this.ctx.pool : asQueryable(tx), m);
  inboxClaimPushMany: Driver['inboxClaimPushMany'] = (p) => this.#afterStartUpCheck(() => inbox.inboxClaimPushMany(this.ctx, p));
  inboxRenewMany: Driver['inboxRenewMany'] = (p) => inbox.inboxRenewMany(this.ctx, p);
  inboxForward: Driver['inboxForward'] = (item, defaults) => inbox.inboxForward(this.ctx, item, defaults);
  inboxForwardMany: Driver['inboxForwardMany'] = (items, defaults) => inbox.inboxForwardMany(this.ctx, items, defaults);
  inboxRetryMany: Driver['inboxRetryMany'] = (p) => inbox.inboxRetryMany(this.ctx, p);
  inboxMarkDeadMany: Driver['inboxMarkDeadMany'] = (p) => inbox.inboxMarkDeadMany(this.ctx, p);
  inboxReleaseMany: NonNullable<Driver['inboxReleaseMany']> = (p) => inbox.inboxReleaseMany(this.ctx, p);
  inboxReclaimExpired: Driver['inboxReclaimExpired'] = (p) => inbox.inboxReclaimExpired(this.ctx, p);
  inboxStats: Driver['inboxStats'] = (scope) => inbox.inboxStats(this.ctx, scope);
  inboxDeadList: Driver['inboxDeadList'] = (p) => inbox.inboxDeadList(this.ctx, p);
  inboxDeleteFinished: Driver['inboxDeleteFinished'] = (p) => inbox.inboxDeleteFinished(this.ctx, p);
  inboxReplay: Driver['inboxReplay'] = (f) => inboxReplay(this.ctx, f);
  inboxReplayPreview: Driver['inboxReplayPreview'] = (p) => inboxReplayPreview(this.ctx, p);

  passRecordFinished: Driver['passRecordFinished'] = (p) => passRecordFinished(this.ctx, p.worker);
  passListFinished: Driver['passListFinished'] = () => passListFinished(this.ctx);

  outboxCountDue: Driver['outboxCountDue'] = (p) => scaleOut.outboxCountDue(this.ctx, p.limit);
  inboxCountDue: Driver['inboxCountDue'] = (p) => scaleOut.inboxCountDue(this.ctx, p.limit);
  scaleOutAcquire: Driver['scaleOutAcquire'] = (p) => scaleOut.scaleOutAcquire(this.ctx, p);
  scaleOutStart: Driver['scaleOutStart'] = (p) => scaleOut.scaleOutStart(this.ctx, p);
  scaleOutRelease: Driver['scaleOutRelease'] = (p) => scaleOut.scaleOutRelease(this.ctx, p);

  pullClaimMany: Driver['pullClaimMany'] = (p) => this.#afterStartUpCheck(() => pull.pullClaimMany(this.ctx, p));
  pullRenew: Driver['pullRenew'] = (p) => pull.pullRenew(this.ctx, p);
  pullComplete: Driver['pullComplete'] = (tx, claim) => pull.pullComplete(this.ctx, asQueryable(tx), claim);
  pullRetry: Driver['pullRetry'] = (p) => pull.pullRetry(this.ctx, p);
  pullMarkDead: Driver['pullMarkDead'] = (p) => pull.pullMarkDead(this.ctx, p);
  pullRelease: Driver['pullRelease'] = (p) => pull.pullRelease(this.ctx, p);

  outboxStatsByState: Driver['outboxStatsByState'] = (p) => consoleReads.outboxStatsByState(this.ctx, p);
  outboxClaimsInFlight: Driver['outboxClaimsInFlight'] = (p) => consoleReads.outboxClaimsInFlight(this.ctx, p);
  outboxBlockedKeys: Driver['outboxBlockedKeys'] = (p) => consoleReads.outboxBlockedKeys(this.ctx, p);
  outboxDeadSearch: Driver['outboxDeadSearch'] = (q) => consoleReads.outboxDeadSearch(this.ctx, q);
  outboxDeadGroups: Driver['outboxDeadGroups'] = (q) => consoleReads.outboxDeadGroups(this.ctx, q);
  outboxRowGet: Driver['outboxRowGet'] = (p) => consoleReads.outboxRowGet(this.ctx, p);
  inboxStatsByState: Driver['inboxStatsByState'] = (p) => consoleReads.inboxStatsByState(this.ctx, p);
  inboxClaimsInFlight: Driver['inboxClaimsInFlight'] = (p) => consoleReads.inboxClaimsInFlight(this.ctx, p);
  inboxBlockedAggregates: Driver['inboxBlockedAggregates'] = (p) => consoleReads.inboxBlockedAggregates(this.ctx, p);
  inboxDeadSearch: Driver['inboxDeadSearch'] = (q) => consoleReads.inboxDeadSearch(this.ctx, q);
  inboxDeadGroups: Driver['inboxDeadGroups'] = (q) => consoleReads.inboxDeadGroups(this.ctx, q);
  inboxRowGet: Driver['inboxRowGet'] = (p) => consoleReads.inboxRowGet(this.ctx, p);
}

/**
 * The claim statements a configuration sends through functions, which `migrate` (and
 * `migrate --sql`) creates: the outbox window and full claims at `outbox.batchSize`; none with
 * `database.claimFunctions: false`.
 */
export function pgClaimStatements(names: PgNames, options: { claimFunctions: boolean; batchSize: number; rowsPerKey: number }): ClaimStatement[] {
  if (!options.claimFunctions) return [];
  const outboxClaims = outbox.outboxClaimStatements(names, options.batchSize, options.rowsPerKey);
  return [outboxClaims.window, outboxClaims.full];
}

export type { pg };
