/**
 * Numbered PostgreSQL migrations, compiled into the code (nothing reads files at run time).
 *
 * Rules: a released migration is never edited; a change is a new number. Each migration is
 * idempotent on its own (`IF NOT EXISTS`) and runs inside the migrate transaction, which holds
 * `pg_advisory_xact_lock` so concurrent `migrate` calls serialize instead of failing.
 */
import { quoteIdent, type PgNames } from './names.ts';

export interface PgMigration {
  version: number;
  name: string;
  sql(names: PgNames): string;
}

export const pgMigrations: readonly PgMigration[] = [
  {
    version: 1,
    name: 'outbox, inbox and maintenance tables',
    sql: (n) => {
      const o = n.outboxTable;
      const i = n.inboxTable;
      return `
CREATE SEQUENCE IF NOT EXISTS ${n.outboxSequence};
CREATE TABLE IF NOT EXISTS ${n.outbox} (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  topic varchar(255) NOT NULL,
  key varchar(255) NULL,
  payload jsonb NOT NULL,
  headers jsonb NOT NULL DEFAULT '{}'::jsonb,
  state varchar(50) NOT NULL DEFAULT 'pending',
  attempt integer NOT NULL DEFAULT 0,
  max_attempts integer NOT NULL DEFAULT 5,
  scheduled_at timestamptz NOT NULL DEFAULT now(),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  claimed_at timestamptz NULL,
  claim_token uuid NULL,
  lease_expires_at timestamptz NULL,
  last_error text NULL,
  sequence bigint NOT NULL DEFAULT nextval('${n.outboxSequence.replaceAll("'", "''")}'),
  replay_count integer NOT NULL DEFAULT 0,
  CONSTRAINT ${quoteIdent(`${o}_state_check`)} CHECK (state IN ('pending', 'processing', 'sent', 'dead')),
  CONSTRAINT ${quoteIdent(`${o}_headers_object`)} CHECK (jsonb_typeof(headers) = 'object'),
  CONSTRAINT ${quoteIdent(`${o}_attempts_check`)} CHECK (attempt >= 0 AND max_attempts >= 1)
);
ALTER SEQUENCE ${n.outboxSequence} OWNED BY ${n.outbox}.sequence;
-- Claim path for rows without a key and for key heads: due pending rows in claim order.
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${o}_pending_idx`)} ON ${n.outbox} (scheduled_at, sequence) WHERE state = 'pending';
-- Head of a key: lowest sequence among its pending and processing rows.
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${o}_key_head_idx`)} ON ${n.outbox} (key, sequence) WHERE state IN ('pending', 'processing') AND key IS NOT NULL;
-- Reclaim: processing rows by lease.
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${o}_lease_idx`)} ON ${n.outbox} (lease_expires_at) WHERE state = 'processing';
-- Retention and replay of finished rows.
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${o}_finished_idx`)} ON ${n.outbox} (state, updated_at) WHERE state IN ('sent', 'dead');

CREATE SEQUENCE IF NOT EXISTS ${n.inboxSequence};
CREATE TABLE IF NOT EXISTS ${n.inbox} (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  source varchar(255) NOT NULL,
  idempotency_key varchar(255) NOT NULL,
  aggregate_id varchar(255) NULL,
  event_type varchar(255) NULL,
  payload jsonb NOT NULL,
  headers jsonb NOT NULL DEFAULT '{}'::jsonb,
  correlation_id varchar(128) NULL,
  consumption varchar(10) NOT NULL DEFAULT 'push',
  state varchar(50) NOT NULL DEFAULT 'pending',
  attempt integer NOT NULL DEFAULT 0,
  scheduled_at timestamptz NOT NULL DEFAULT now(),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  processed_at timestamptz NULL,
  claimed_at timestamptz NULL,
  claim_token uuid NULL,
  lease_expires_at timestamptz NULL,
  last_error text NULL,
  sequence bigint NOT NULL DEFAULT nextval('${n.inboxSequence.replaceAll("'", "''")}'),
  CONSTRAINT ${quoteIdent(`${i}_source_idempotency_key`)} UNIQUE (source, idempotency_key),
  CONSTRAINT ${quoteIdent(`${i}_state_check`)} CHECK (state IN ('pending', 'processing', 'processed', 'dead')),
  CONSTRAINT ${quoteIdent(`${i}_consumption_check`)} CHECK (consumption IN ('push', 'pull')),
  CONSTRAINT ${quoteIdent(`${i}_headers_object`)} CHECK (jsonb_typeof(headers) = 'object')
);
ALTER SEQUENCE ${n.inboxSequence} OWNED BY ${n.inbox}.sequence;
-- Relay claim path: due push rows in receive order.
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${i}_push_pending_idx`)} ON ${n.inbox} (scheduled_at, sequence) WHERE state = 'pending' AND consumption = 'push';
-- Head of an aggregate (push): lowest sequence among its pending and processing rows.
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${i}_aggregate_head_idx`)} ON ${n.inbox} (aggregate_id, sequence) WHERE state IN ('pending', 'processing') AND aggregate_id IS NOT NULL AND consumption = 'push';
-- Pull claim path: open rows of one source in claim order.
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${i}_pull_open_idx`)} ON ${n.inbox} (source, scheduled_at, created_at, id) WHERE state IN ('pending', 'processing') AND consumption = 'pull';
-- Pull: aggregates of a source under a live lease.
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${i}_pull_busy_idx`)} ON ${n.inbox} (source, aggregate_id) WHERE state = 'processing' AND consumption = 'pull';
-- Reclaim: processing rows by lease.
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${i}_lease_idx`)} ON ${n.inbox} (lease_expires_at) WHERE state = 'processing';
-- Retention of finished rows.
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${i}_finished_idx`)} ON ${n.inbox} (state, created_at) WHERE state IN ('processed', 'dead');

CREATE TABLE IF NOT EXISTS ${n.maintenance} (
  name varchar(255) PRIMARY KEY,
  last_run_at timestamptz NOT NULL DEFAULT '-infinity'
);
`;
    },
  },
  {
    version: 2,
    name: 'pull head-of-aggregate index',
    // The pull claim's head check (no earlier open row of the same source and aggregate) probes
    // this index instead of scanning the source's open rows per candidate.
    sql: (n) => `
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${n.inboxTable}_pull_head_idx`)} ON ${n.inbox} (source, aggregate_id, sequence) WHERE state IN ('pending', 'processing') AND consumption = 'pull';
`,
  },
  {
    version: 3,
    name: 'in-flight rows per key and per aggregate',
    // A row that commits after a later row of its key was claimed (its sequence came first but
    // its transaction committed last) must not go in flight beside it: the claims check these
    // small indexes of processing rows, besides the head check.
    sql: (n) => `
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${n.outboxTable}_key_processing_idx`)} ON ${n.outbox} (key) WHERE state = 'processing' AND key IS NOT NULL;
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${n.inboxTable}_aggregate_processing_idx`)} ON ${n.inbox} (aggregate_id) WHERE state = 'processing' AND consumption = 'push' AND aggregate_id IS NOT NULL;
`,
  },
  {
    version: 4,
    name: 'due retries first',
    // The claims take due retries (attempt > 0) before first attempts: these small indexes hold
    // only rows waiting for another attempt, so that first branch of each claim is an index range.
    sql: (n) => `
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${n.outboxTable}_retry_idx`)} ON ${n.outbox} (scheduled_at, sequence) WHERE state = 'pending' AND attempt > 0;
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${n.inboxTable}_push_retry_idx`)} ON ${n.inbox} (scheduled_at, sequence) WHERE state = 'pending' AND consumption = 'push' AND attempt > 0;
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${n.inboxTable}_pull_retry_idx`)} ON ${n.inbox} (source, scheduled_at, created_at, id) WHERE state IN ('pending', 'processing') AND consumption = 'pull' AND attempt > 0;
`,
  },
  {
    version: 6,
    name: 'one row in flight per key as an index; aggregates per source; keyless rows apart',
    // The claims find the head of every key that can move by a loose scan of the key-head
    // indexes (one probe per key, not one per waiting row) and read keyless rows from their own
    // index. A unique index on the key of `processing` rows makes "one row per key in flight" a
    // database rule: a claim that would put a second row of a key in flight fails and is retried.
    // An empty key or aggregate id is keyless. Inbox aggregates are scoped per source.
    sql: (n) => {
      const o = n.outboxTable;
      const i = n.inboxTable;
      return `
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${o}_keyless_idx`)} ON ${n.outbox} (scheduled_at, sequence) WHERE state = 'pending' AND (key IS NULL OR key = '');
CREATE UNIQUE INDEX IF NOT EXISTS ${quoteIdent(`${o}_key_in_flight_idx`)} ON ${n.outbox} (key) WHERE state = 'processing' AND key <> '';
DROP INDEX IF EXISTS ${quoteIdent(n.schema)}.${quoteIdent(`${o}_key_processing_idx`)};
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${i}_push_keyless_idx`)} ON ${n.inbox} (scheduled_at, sequence) WHERE state = 'pending' AND consumption = 'push' AND (aggregate_id IS NULL OR aggregate_id = '');
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${i}_push_head_idx`)} ON ${n.inbox} (source, aggregate_id, sequence) WHERE state IN ('pending', 'processing') AND consumption = 'push' AND aggregate_id <> '';
CREATE UNIQUE INDEX IF NOT EXISTS ${quoteIdent(`${i}_push_in_flight_idx`)} ON ${n.inbox} (source, aggregate_id) WHERE state = 'processing' AND consumption = 'push' AND aggregate_id <> '';
DROP INDEX IF EXISTS ${quoteIdent(n.schema)}.${quoteIdent(`${i}_aggregate_head_idx`)};
DROP INDEX IF EXISTS ${quoteIdent(n.schema)}.${quoteIdent(`${i}_aggregate_processing_idx`)};
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${i}_pull_keyless_idx`)} ON ${n.inbox} (source, scheduled_at, created_at, id) WHERE state IN ('pending', 'processing') AND consumption = 'pull' AND (aggregate_id IS NULL OR aggregate_id = '');
`;
    },
  },
  {
    version: 7,
    name: 'trace context of a row',
    // The writer's trace context (W3C traceparent/tracestate, X-Ray trace header) as a small JSON
    // object; NULL for rows written without one and for every row written before this version.
    sql: (n) => `
ALTER TABLE ${n.outbox} ADD COLUMN IF NOT EXISTS trace_context jsonb NULL;
ALTER TABLE ${n.inbox} ADD COLUMN IF NOT EXISTS trace_context jsonb NULL;
`,
  },
  {
    version: 8,
    name: 'max_attempts counts deliveries',
    // `max_attempts` was the number of retries (5: six deliveries); it is now the number of
    // deliveries. Every row that can still be delivered, or replayed, keeps the deliveries it was
    // written for: `max_attempts + 1`. Sent rows are left as they are (reading them all would
    // rewrite the table); one replayed later gets one delivery fewer than it was written for.
    sql: (n) => `
UPDATE ${n.outbox} SET max_attempts = max_attempts + 1 WHERE state IN ('pending', 'processing', 'dead');
`,
  },
  {
    version: 9,
    name: 'one holder per key: several rows of a key in one claim',
    // A claim may hold the head of a key and the next rows of that key (`outbox.rowsPerKey`).
    // `key_first` marks the first row of its key in its claim; every claim that holds rows of a
    // key holds exactly one such row, so the unique index on the key of the first rows in flight
    // still refuses a second holder of a key. Rows claimed before this version were each the
    // only row of their key in their claim: `true`.
    sql: (n) => {
      const o = n.outboxTable;
      return `
ALTER TABLE ${n.outbox} ADD COLUMN IF NOT EXISTS key_first boolean NOT NULL DEFAULT true;
CREATE UNIQUE INDEX IF NOT EXISTS ${quoteIdent(`${o}_key_holder_in_flight_idx`)} ON ${n.outbox} (key) WHERE state = 'processing' AND key <> '' AND key_first;
DROP INDEX IF EXISTS ${quoteIdent(n.schema)}.${quoteIdent(`${o}_key_in_flight_idx`)};
`;
    },
  },
  {
    version: 10,
    name: 'keys of the outbox rows in flight',
    // The claim turns down a row whose key has any row in flight (a follower left in flight after
    // its key's first row was sent included), for every candidate row. Since version 9 no index
    // held the keys of all rows in flight (the unique one holds the holders only), and PostgreSQL
    // intersected a bitmap of every row in flight with the key's rows per candidate: a claim at
    // 1,000 keys in flight that found nothing took 473 ms instead of 33. Small: in-flight rows only.
    sql: (n) => `
CREATE INDEX IF NOT EXISTS ${quoteIdent(`${n.outboxTable}_key_busy_idx`)} ON ${n.outbox} (key) WHERE state = 'processing' AND key <> '';
`,
  },
];

/** Columns every table must have: used by `schemaVerify` to print the exact ALTER TABLE to run. */
export function pgExpectedColumns(n: PgNames): Array<{ table: string; qualified: string; columns: Array<{ name: string; ddl: string }> }> {
  return [
    {
      table: n.outboxTable,
      qualified: n.outbox,
      columns: [
        { name: 'id', ddl: 'uuid NOT NULL DEFAULT gen_random_uuid()' },
        { name: 'topic', ddl: 'varchar(255) NOT NULL' },
        { name: 'key', ddl: 'varchar(255) NULL' },
        { name: 'payload', ddl: 'jsonb NOT NULL' },
        { name: 'headers', ddl: "jsonb NOT NULL DEFAULT '{}'::jsonb" },
        { name: 'state', ddl: "varchar(50) NOT NULL DEFAULT 'pending'" },
        { name: 'attempt', ddl: 'integer NOT NULL DEFAULT 0' },
        { name: 'max_attempts', ddl: 'integer NOT NULL DEFAULT 5' },
        { name: 'scheduled_at', ddl: 'timestamptz NOT NULL DEFAULT now()' },
        { name: 'created_at', ddl: 'timestamptz NOT NULL DEFAULT now()' },
        { name: 'updated_at', ddl: 'timestamptz NOT NULL DEFAULT now()' },
        { name: 'claimed_at', ddl: 'timestamptz NULL' },
        { name: 'claim_token', ddl: 'uuid NULL' },
        { name: 'lease_expires_at', ddl: 'timestamptz NULL' },
        { name: 'last_error', ddl: 'text NULL' },
        { name: 'sequence', ddl: `bigint NOT NULL DEFAULT nextval('${n.outboxSequence.replaceAll("'", "''")}')` },
        { name: 'replay_count', ddl: 'integer NOT NULL DEFAULT 0' },
        { name: 'trace_context', ddl: 'jsonb NULL' },
        { name: 'key_first', ddl: 'boolean NOT NULL DEFAULT true' },
      ],
    },
    {
      table: n.inboxTable,
      qualified: n.inbox,
      columns: [
        { name: 'id', ddl: 'uuid NOT NULL DEFAULT gen_random_uuid()' },
        { name: 'source', ddl: 'varchar(255) NOT NULL' },
        { name: 'idempotency_key', ddl: 'varchar(255) NOT NULL' },
        { name: 'aggregate_id', ddl: 'varchar(255) NULL' },
        { name: 'event_type', ddl: 'varchar(255) NULL' },
        { name: 'payload', ddl: 'jsonb NOT NULL' },
        { name: 'headers', ddl: "jsonb NOT NULL DEFAULT '{}'::jsonb" },
        { name: 'correlation_id', ddl: 'varchar(128) NULL' },
        { name: 'consumption', ddl: "varchar(10) NOT NULL DEFAULT 'push'" },
        { name: 'state', ddl: "varchar(50) NOT NULL DEFAULT 'pending'" },
        { name: 'attempt', ddl: 'integer NOT NULL DEFAULT 0' },
        { name: 'scheduled_at', ddl: 'timestamptz NOT NULL DEFAULT now()' },
        { name: 'created_at', ddl: 'timestamptz NOT NULL DEFAULT now()' },
        { name: 'updated_at', ddl: 'timestamptz NOT NULL DEFAULT now()' },
        { name: 'processed_at', ddl: 'timestamptz NULL' },
        { name: 'claimed_at', ddl: 'timestamptz NULL' },
        { name: 'claim_token', ddl: 'uuid NULL' },
        { name: 'lease_expires_at', ddl: 'timestamptz NULL' },
        { name: 'last_error', ddl: 'text NULL' },
        { name: 'sequence', ddl: `bigint NOT NULL DEFAULT nextval('${n.inboxSequence.replaceAll("'", "''")}')` },
        { name: 'trace_context', ddl: 'jsonb NULL' },
      ],
    },
    {
      table: n.maintenanceTable,
      qualified: n.maintenance,
      columns: [
        { name: 'name', ddl: 'varchar(255) NOT NULL' },
        { name: 'last_run_at', ddl: "timestamptz NOT NULL DEFAULT '-infinity'" },
      ],
    },
  ];
}
