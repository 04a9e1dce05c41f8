/**
 * QueueBox errors: one base class and one subclass per failure, each carrying its data.
 *
 * A lost claim is *not* an error: fenced writes report it as an outcome (see `lib/claims`).
 */

/** Base of every error QueueBox throws on purpose. */
export class QueueBoxError extends Error {
  override readonly name: string = 'QueueBoxError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** One problem of a configuration: the dotted key, what is wrong, and the environment variable(s) that set the key, if any. */
export interface ConfigIssue {
  key: string;
  message: string;
  /** The `QUEUEBOX_*` override (or other variable) that set the key, shown as `key (from VARIABLE): message`. */
  variable?: string;
}

/**
 * Invalid configuration; `key` is the dotted path of the offending key (e.g. `outbox.batchSize`).
 * A key set by an environment variable is shown with it: `outbox.batchSiz (from QUEUEBOX_OUTBOX__BATCH_SIZ): unknown key`.
 */
export class ConfigError extends QueueBoxError {
  override readonly name = 'ConfigError';
  constructor(readonly issues: readonly ConfigIssue[]) {
    super(`Invalid QueueBox configuration:\n${issues.map((i) => `  - ${i.key}${i.variable !== undefined ? ` (from ${i.variable})` : ''}: ${i.message}`).join('\n')}`);
  }
  /** Dotted path of the first offending key. */
  get key(): string {
    return this.issues[0]?.key ?? '';
  }
}

/** A message given to `enqueue` (or received) that cannot be stored; `field` names the problem. */
export class ValidationError extends QueueBoxError {
  override readonly name = 'ValidationError';
  constructor(
    readonly field: string,
    detail: string,
  ) {
    super(`${field} ${detail}`);
  }
}

/**
 * The database refused the JSON of an inbox message as invalid or out of range (PostgreSQL:
 * SQLSTATE 22P02, 22003 or 22P05 on the insert; SQL Server: the insert's one-JSON-value check,
 * error 51003); nothing was stored. `code` is the SQLSTATE or error number. The receivers treat
 * it as an invalid body.
 */
export class PayloadRejectedError extends QueueBoxError {
  override readonly name = 'PayloadRejectedError';
  constructor(
    message: string,
    readonly code: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The database schema lacks what this version needs; `statements` are the exact DDL to run. */
export class SchemaMismatchError extends QueueBoxError {
  override readonly name = 'SchemaMismatchError';
  constructor(readonly statements: readonly string[]) {
    // The statements say what is missing; they are not a substitute for `migrate`, which also
    // applies the migrations' indexes, constraints and data changes, and records them.
    super(
      `The QueueBox tables are missing columns: run \`queuebox migrate\` (or its script, \`queuebox migrate --sql\`). Adding the columns alone would leave out the migrations' indexes and data changes. Missing:\n${statements.join('\n')}`,
    );
  }
}

/** A database failure that is expected to pass (lock timeout, serialization, connection loss). */
export class TransientDatabaseError extends QueueBoxError {
  override readonly name = 'TransientDatabaseError';
  constructor(
    message: string,
    readonly code: string | undefined,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** A unique constraint was violated; `constraint` names it when the database says. */
export class UniqueViolationError extends QueueBoxError {
  override readonly name = 'UniqueViolationError';
  constructor(
    readonly constraint: string | undefined,
    options?: { cause?: unknown },
  ) {
    super(`unique constraint violated${constraint ? `: ${constraint}` : ''}`, options);
  }
}

/** An operation was asked for without what it needs (e.g. a replay without any filter). */
export class UsageError extends QueueBoxError {
  override readonly name = 'UsageError';
}

/** A bounded replay (`ReplayFilter.maxRows`) found more than `maxRows` rows matching at the moment of the move, so it moved none. */
export class ReplayLimitError extends UsageError {
  constructor(readonly maxRows: number) {
    super(`replay: more than ${maxRows} rows match now; nothing moved`);
  }
}

/** An optional package QueueBox needs for this feature is not installed; `packageName` names it. */
export class MissingPackageError extends QueueBoxError {
  override readonly name = 'MissingPackageError';
  constructor(
    readonly packageName: string,
    feature: string,
    version: string,
    options?: { cause?: unknown; devDependency?: boolean },
  ) {
    super(`${feature} needs the optional package "${packageName}", which is not installed: npm install ${options?.devDependency === true ? '--save-dev ' : ''}${packageName}@${version}`, options);
  }
}

/**
 * The QueueBox schema is not QueueBox's alone: another role may create objects in it, or owns an
 * object of a name QueueBox uses. `problems` names each role or object (and its owner).
 */
export class SchemaTrustError extends QueueBoxError {
  override readonly name = 'SchemaTrustError';
  constructor(
    readonly schema: string,
    readonly problems: readonly string[],
  ) {
    // Row-level security hides rows rather than planting objects: its lines say what to do.
    const planted = problems.some((p) => !p.startsWith('row-level security '));
    super(
      planted
        ? `QueueBox refuses to use schema "${schema}": objects in it run with QueueBox's rights, and another role could plant them.\n${problems.map((p) => `- ${p}`).join('\n')}\n` +
            'Use a schema of its own (database.schema) that only the QueueBox roles may create in; see docs/security.md, "Schema ownership".'
        : `QueueBox refuses to use schema "${schema}": row-level security on its tables would hide rows from QueueBox's role, and its passes would claim nothing.\n${problems.map((p) => `- ${p}`).join('\n')}`,
    );
  }
}

/**
 * A fenced write (or renewal) waited on another transaction's lock on one of its rows until the
 * row's lease ended, and changed nothing: every claim it carried is lost (the workers count and
 * log it as such and leave the rows to the reclaim; it is not a failure of their pass).
 */
export class FencedLockTimeoutError extends QueueBoxError {
  override readonly name = 'FencedLockTimeoutError';
}
