/**
 * Bracket-quoted, schema-qualified names of QueueBox's SQL Server objects, and the claim lock names.
 *
 * Identifiers were validated by the config schema (`IDENTIFIER_PATTERN`); this is the one place
 * that quotes them for interpolation into SQL text. Values are always bound, never interpolated.
 */
import { IDENTIFIER_PATTERN } from '../../config/identifier.ts';
import { QueueBoxError } from '../../errors.ts';

/** Default schema on SQL Server. */
export const MSSQL_DEFAULT_SCHEMA = 'dbo';

/** Brackets a validated identifier; refuses anything the config schema would refuse. */
export function quoteMssqlIdent(name: string): string {
  if (!IDENTIFIER_PATTERN.test(name)) throw new QueueBoxError(`refusing to quote unsafe identifier ${JSON.stringify(name)}`);
  return `[${name}]`;
}

/** Every object name the SQL Server queries use. */
export interface MssqlNames {
  schema: string;
  outboxTable: string;
  inboxTable: string;
  maintenanceTable: string;
  /** Bracketed, qualified (`[dbo].[outbox]`). */
  outbox: string;
  inbox: string;
  maintenance: string;
  migrations: string;
  outboxSequence: string;
  inboxSequence: string;
  /** Application lock serializing outbox claims (seed: claim locks), qualified by schema and table. */
  outboxClaimLock: string;
  /** Application lock serializing relay claims. */
  inboxClaimLock: string;
  /**
   * Prefix of the per-source pull claim lock; the claim appends the SHA-256 of the exact source
   * name in SQL (from its parameter), so every source, however long, has its own lock name.
   */
  pullClaimLockPrefix: string;
}

/** A validated identifier as part of a lock name (at most 63 characters each, so every name fits 255). */
function lockPart(name: string): string {
  return quoteMssqlIdent(name).slice(1, -1);
}

/** Builds the names; throws on an identifier the config schema would refuse. */
export function mssqlNames(schema: string, tables: { outbox: string; inbox: string; maintenance: string }): MssqlNames {
  const q = (name: string) => `${quoteMssqlIdent(schema)}.${quoteMssqlIdent(name)}`;
  return {
    schema,
    outboxTable: tables.outbox,
    inboxTable: tables.inbox,
    maintenanceTable: tables.maintenance,
    outbox: q(tables.outbox),
    inbox: q(tables.inbox),
    maintenance: q(tables.maintenance),
    migrations: q('queuebox_migrations'),
    outboxSequence: q(`${tables.outbox}_sequence_seq`),
    inboxSequence: q(`${tables.inbox}_sequence_seq`),
    outboxClaimLock: `queuebox:${lockPart(schema)}.${lockPart(tables.outbox)}:outbox_claim`,
    inboxClaimLock: `queuebox:${lockPart(schema)}.${lockPart(tables.inbox)}:relay_claim`,
    pullClaimLockPrefix: `queuebox:${lockPart(schema)}.${lockPart(tables.inbox)}:pull_claim:`,
  };
}
