/**
 * Quoted, schema-qualified names of QueueBox's PostgreSQL objects.
 *
 * Identifiers were validated by the config schema (`IDENTIFIER_PATTERN`); this is the one place
 * that quotes them for interpolation into SQL text. Values are always bound, never interpolated.
 */
import { IDENTIFIER_PATTERN } from '../../config/identifier.ts';
import { QueueBoxError } from '../../errors.ts';

/** Quotes a validated identifier; refuses anything the config schema would refuse. */
export function quoteIdent(name: string): string {
  if (!IDENTIFIER_PATTERN.test(name)) throw new QueueBoxError(`refusing to quote unsafe identifier ${JSON.stringify(name)}`);
  return `"${name}"`;
}

/** Every object name the PostgreSQL queries use. */
export interface PgNames {
  schema: string;
  outboxTable: string;
  inboxTable: string;
  maintenanceTable: string;
  /** Quoted, qualified. */
  outbox: string;
  inbox: string;
  maintenance: string;
  migrations: string;
  outboxSequence: string;
  inboxSequence: string;
}

export function pgNames(schema: string, tables: { outbox: string; inbox: string; maintenance: string }): PgNames {
  const q = (name: string) => `${quoteIdent(schema)}.${quoteIdent(name)}`;
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
  };
}
