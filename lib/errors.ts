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

/** Invalid configuration; `key` is the dotted path of the offending key (e.g. `outbox.batchSize`). */
export class ConfigError extends QueueBoxError {
  override readonly name = 'ConfigError';
  constructor(
    readonly issues: ReadonlyArray<{ key: string; message: string }>,
  ) {
    super(`Invalid QueueBox configuration:\n${issues.map((i) => `  - ${i.key}: ${i.message}`).join('\n')}`);
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

/** The database schema lacks what this version needs; `statements` are the exact DDL to run. */
export class SchemaMismatchError extends QueueBoxError {
  override readonly name = 'SchemaMismatchError';
  constructor(readonly statements: readonly string[]) {
    super(`The QueueBox tables are missing columns. Run \`queuebox migrate\`, or:\n${statements.join('\n')}`);
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
    options?: { cause?: unknown },
  ) {
    super(`${feature} needs the optional package "${packageName}", which is not installed: npm install ${packageName}@${version}`, options);
  }
}
