/**
 * Numbered SQL Server migrations, compiled into the code (nothing reads files at run time).
 *
 * Same tables and columns as the PostgreSQL migrations: UNIQUEIDENTIFIER ids, NVARCHAR text,
 * NVARCHAR(MAX) JSON with ISJSON checks, DATETIME2(7) in UTC (SYSUTCDATETIME()), `[key]` and
 * `[sequence]` bracketed, `sequence` from a SEQUENCE object; plus, from migration 5, binary-collated
 * key columns and the inbox's byte-length columns. Rules: a released migration never changes what
 * it creates (how an index is built — online or not — may change); each statement is idempotent
 * on its own (guarded by OBJECT_ID / sys.indexes); all run in one transaction that holds
 * `sp_getapplock 'queuebox_migrate'` owned by the transaction.
 */
import { binaryColumn, byteLengthColumn, createIndex, createSequence, disableLockEscalation, dropAutoStatistics, dropIndex, literal } from './migration-ddl.ts';
import { quoteMssqlIdent as q, type MssqlNames } from './names.ts';

export { FILTERED_INDEX_SET_OPTIONS, KEY_COLLATION, ONLINE_INDEX_EDITIONS } from './migration-ddl.ts';

export interface MssqlMigration {
  version: number;
  name: string;
  /** Statements run one by one, each as its own batch, in the migrate transaction. */
  statements(names: MssqlNames): string[];
}

export const mssqlMigrations: readonly MssqlMigration[] = [
  {
    version: 1,
    name: 'outbox, inbox and maintenance tables',
    statements: (n) => {
      const o = n.outboxTable;
      const i = n.inboxTable;
      return [
        createSequence(n.outboxSequence),
        `IF OBJECT_ID(${literal(n.outbox)}, N'U') IS NULL
CREATE TABLE ${n.outbox} (
  id UNIQUEIDENTIFIER NOT NULL DEFAULT NEWID(),
  topic NVARCHAR(255) NOT NULL,
  [key] NVARCHAR(255) NULL,
  payload NVARCHAR(MAX) NOT NULL,
  headers NVARCHAR(MAX) NOT NULL DEFAULT N'{}',
  state NVARCHAR(50) NOT NULL DEFAULT N'pending',
  attempt INT NOT NULL DEFAULT 0,
  max_attempts INT NOT NULL DEFAULT 5,
  scheduled_at DATETIME2(7) NOT NULL DEFAULT SYSUTCDATETIME(),
  created_at DATETIME2(7) NOT NULL DEFAULT SYSUTCDATETIME(),
  updated_at DATETIME2(7) NOT NULL DEFAULT SYSUTCDATETIME(),
  claimed_at DATETIME2(7) NULL,
  claim_token UNIQUEIDENTIFIER NULL,
  lease_expires_at DATETIME2(7) NULL,
  last_error NVARCHAR(MAX) NULL,
  [sequence] BIGINT NOT NULL DEFAULT (NEXT VALUE FOR ${n.outboxSequence}),
  replay_count INT NOT NULL DEFAULT 0,
  CONSTRAINT ${q(`${o}_pkey`)} PRIMARY KEY NONCLUSTERED (id),
  CONSTRAINT ${q(`${o}_state_check`)} CHECK (state IN (N'pending', N'processing', N'sent', N'dead')),
  CONSTRAINT ${q(`${o}_payload_json`)} CHECK (ISJSON(payload) = 1),
  CONSTRAINT ${q(`${o}_headers_object`)} CHECK (ISJSON(headers) = 1 AND LEFT(LTRIM(headers), 1) = N'{'),
  CONSTRAINT ${q(`${o}_attempts_check`)} CHECK (attempt >= 0 AND max_attempts >= 1)
);`,
        // Rows cluster in insert order (a random UUID clustering key would fragment the table).
        createIndex(n.outbox, `${o}_sequence_idx`, 'UNIQUE CLUSTERED INDEX {index} ON {table} ([sequence])', false),
        // Claim path for rows without a key and for key heads: due pending rows in claim order.
        createIndex(n.outbox, `${o}_pending_idx`, `INDEX {index} ON {table} (scheduled_at, [sequence]) WHERE state = N'pending'`, true),
        // Head of a key: lowest sequence among its pending and processing rows.
        createIndex(n.outbox, `${o}_key_head_idx`, `INDEX {index} ON {table} ([key], [sequence]) WHERE state IN (N'pending', N'processing') AND [key] IS NOT NULL`, true),
        // Reclaim: processing rows by lease.
        createIndex(n.outbox, `${o}_lease_idx`, `INDEX {index} ON {table} (lease_expires_at) WHERE state = N'processing'`, true),
        // Retention and replay of finished rows.
        createIndex(n.outbox, `${o}_finished_idx`, `INDEX {index} ON {table} (state, updated_at) WHERE state IN (N'sent', N'dead')`, true),

        createSequence(n.inboxSequence),
        `IF OBJECT_ID(${literal(n.inbox)}, N'U') IS NULL
CREATE TABLE ${n.inbox} (
  id UNIQUEIDENTIFIER NOT NULL DEFAULT NEWID(),
  source NVARCHAR(255) NOT NULL,
  idempotency_key NVARCHAR(255) NOT NULL,
  aggregate_id NVARCHAR(255) NULL,
  event_type NVARCHAR(255) NULL,
  payload NVARCHAR(MAX) NOT NULL,
  headers NVARCHAR(MAX) NOT NULL DEFAULT N'{}',
  correlation_id NVARCHAR(128) NULL,
  consumption NVARCHAR(10) NOT NULL DEFAULT N'push',
  state NVARCHAR(50) NOT NULL DEFAULT N'pending',
  attempt INT NOT NULL DEFAULT 0,
  scheduled_at DATETIME2(7) NOT NULL DEFAULT SYSUTCDATETIME(),
  created_at DATETIME2(7) NOT NULL DEFAULT SYSUTCDATETIME(),
  updated_at DATETIME2(7) NOT NULL DEFAULT SYSUTCDATETIME(),
  processed_at DATETIME2(7) NULL,
  claimed_at DATETIME2(7) NULL,
  claim_token UNIQUEIDENTIFIER NULL,
  lease_expires_at DATETIME2(7) NULL,
  last_error NVARCHAR(MAX) NULL,
  [sequence] BIGINT NOT NULL DEFAULT (NEXT VALUE FOR ${n.inboxSequence}),
  CONSTRAINT ${q(`${i}_pkey`)} PRIMARY KEY NONCLUSTERED (id),
  CONSTRAINT ${q(`${i}_source_idempotency_key`)} UNIQUE (source, idempotency_key),
  CONSTRAINT ${q(`${i}_state_check`)} CHECK (state IN (N'pending', N'processing', N'processed', N'dead')),
  CONSTRAINT ${q(`${i}_consumption_check`)} CHECK (consumption IN (N'push', N'pull')),
  -- Any JSON value (a non-JSON body is stored as a JSON string); ISJSON before 2022 accepts only
  -- objects and arrays, so a scalar is checked wrapped in an array.
  CONSTRAINT ${q(`${i}_payload_json`)} CHECK (ISJSON(payload) = 1 OR ISJSON(N'[' + payload + N']') = 1),
  CONSTRAINT ${q(`${i}_headers_object`)} CHECK (ISJSON(headers) = 1 AND LEFT(LTRIM(headers), 1) = N'{')
);`,
        createIndex(n.inbox, `${i}_sequence_idx`, 'UNIQUE CLUSTERED INDEX {index} ON {table} ([sequence])', false),
        // Relay claim path: due push rows in receive order.
        createIndex(n.inbox, `${i}_push_pending_idx`, `INDEX {index} ON {table} (scheduled_at, [sequence]) WHERE state = N'pending' AND consumption = N'push'`, true),
        // Head of an aggregate (push): lowest sequence among its pending and processing rows.
        createIndex(n.inbox, `${i}_aggregate_head_idx`, `INDEX {index} ON {table} (aggregate_id, [sequence]) WHERE state IN (N'pending', N'processing') AND aggregate_id IS NOT NULL AND consumption = N'push'`, true),
        // Pull claim path: open rows of one source in claim order.
        createIndex(n.inbox, `${i}_pull_open_idx`, `INDEX {index} ON {table} (source, scheduled_at, created_at, id) WHERE state IN (N'pending', N'processing') AND consumption = N'pull'`, true),
        // Pull: aggregates of a source under a live lease.
        createIndex(n.inbox, `${i}_pull_busy_idx`, `INDEX {index} ON {table} (source, aggregate_id) INCLUDE (lease_expires_at) WHERE state = N'processing' AND consumption = N'pull'`, true),
        // Reclaim: processing rows by lease.
        createIndex(n.inbox, `${i}_lease_idx`, `INDEX {index} ON {table} (lease_expires_at) WHERE state = N'processing'`, true),
        // Retention of finished rows.
        createIndex(n.inbox, `${i}_finished_idx`, `INDEX {index} ON {table} (state, created_at) WHERE state IN (N'processed', N'dead')`, true),

        `IF OBJECT_ID(${literal(n.maintenance)}, N'U') IS NULL
CREATE TABLE ${n.maintenance} (
  name NVARCHAR(255) NOT NULL,
  last_run_at DATETIME2(7) NOT NULL DEFAULT '0001-01-01T00:00:00',
  CONSTRAINT ${q(`${n.maintenanceTable}_pkey`)} PRIMARY KEY (name)
);`,
      ];
    },
  },
  {
    version: 2,
    name: 'pull head-of-aggregate index',
    // Same index as PostgreSQL migration 2: the pull claim's head check probes it.
    statements: (n) => [
      createIndex(n.inbox, `${n.inboxTable}_pull_head_idx`, `INDEX {index} ON {table} (source, aggregate_id, [sequence]) WHERE state IN (N'pending', N'processing') AND consumption = N'pull'`, true),
    ],
  },
  {
    version: 3,
    name: 'in-flight rows per key and per aggregate',
    // Same indexes as PostgreSQL migration 3.
    statements: (n) => [
      createIndex(n.outbox, `${n.outboxTable}_key_processing_idx`, `INDEX {index} ON {table} ([key]) WHERE state = N'processing' AND [key] IS NOT NULL`, true),
      createIndex(n.inbox, `${n.inboxTable}_aggregate_processing_idx`, `INDEX {index} ON {table} (aggregate_id) WHERE state = N'processing' AND consumption = N'push' AND aggregate_id IS NOT NULL`, true),
    ],
  },
  {
    version: 4,
    name: 'due retries first',
    // Same indexes as PostgreSQL migration 4: rows waiting for another attempt, for the claims'
    // first branch (`retriesFirst`).
    statements: (n) => [
      createIndex(n.outbox, `${n.outboxTable}_retry_idx`, `INDEX {index} ON {table} (scheduled_at, [sequence]) WHERE state = N'pending' AND attempt > 0`, true),
      createIndex(n.inbox, `${n.inboxTable}_push_retry_idx`, `INDEX {index} ON {table} (scheduled_at, [sequence]) WHERE state = N'pending' AND consumption = N'push' AND attempt > 0`, true),
      createIndex(n.inbox, `${n.inboxTable}_pull_retry_idx`, `INDEX {index} ON {table} (source, scheduled_at, created_at, id) WHERE state IN (N'pending', N'processing') AND consumption = N'pull' AND attempt > 0`, true),
    ],
  },
  {
    version: 5,
    name: 'binary collation of keys, sources, idempotency and aggregate ids; per-source aggregates; keyless rows',
    // Keys that differ in case (or trailing spaces) are different keys, as on PostgreSQL. The
    // indexes and the unique constraint on those columns are dropped, the columns re-collated, and
    // the indexes rebuilt: aggregates per (source, aggregate_id), deduplication on the exact
    // (source, idempotency_key) including byte lengths, and indexes for rows without a key or
    // aggregate (the claims' free branches).
    statements: (n) => {
      const o = n.outboxTable;
      const i = n.inboxTable;
      const outboxIndexes = [`${o}_key_head_idx`, `${o}_key_processing_idx`];
      const inboxIndexes = [`${i}_aggregate_head_idx`, `${i}_aggregate_processing_idx`, `${i}_pull_open_idx`, `${i}_pull_busy_idx`, `${i}_pull_head_idx`, `${i}_pull_retry_idx`, `${i}_source_idempotency_key`];
      const open = `state IN (N'pending', N'processing')`;
      return [
        `IF OBJECT_ID(${literal(`${q(n.schema)}.${q(`${i}_source_idempotency_key`)}`)}, N'UQ') IS NOT NULL ALTER TABLE ${n.inbox} DROP CONSTRAINT ${q(`${i}_source_idempotency_key`)};`,
        ...outboxIndexes.map((index) => dropIndex(n.outbox, index)),
        ...inboxIndexes.map((index) => dropIndex(n.inbox, index)),
        dropAutoStatistics(n.outbox, ['key']),
        dropAutoStatistics(n.inbox, ['source', 'idempotency_key', 'aggregate_id']),
        binaryColumn(n.outbox, 'key', 'NVARCHAR(255) NULL'),
        binaryColumn(n.inbox, 'source', 'NVARCHAR(255) NOT NULL'),
        binaryColumn(n.inbox, 'idempotency_key', 'NVARCHAR(255) NOT NULL'),
        binaryColumn(n.inbox, 'aggregate_id', 'NVARCHAR(255) NULL'),
        byteLengthColumn(n.inbox, 'source'),
        byteLengthColumn(n.inbox, 'idempotency_key'),
        // An index on computed columns needs the same SET options as a filtered index.
        createIndex(n.inbox, `${i}_source_idempotency_key`, 'UNIQUE INDEX {index} ON {table} (source, idempotency_key, source_bytes, idempotency_key_bytes)', true),
        createIndex(n.outbox, `${o}_key_head_idx`, `INDEX {index} ON {table} ([key], [sequence]) WHERE ${open} AND [key] IS NOT NULL`, true),
        createIndex(n.outbox, `${o}_key_processing_idx`, `INDEX {index} ON {table} ([key]) WHERE state = N'processing' AND [key] IS NOT NULL`, true),
        createIndex(n.outbox, `${o}_keyless_pending_idx`, `INDEX {index} ON {table} (scheduled_at, [sequence]) WHERE state = N'pending' AND [key] IS NULL`, true),
        // Rows with an empty key (keyless too): without it their claim branch reads every pending row.
        createIndex(n.outbox, `${o}_empty_key_pending_idx`, `INDEX {index} ON {table} (scheduled_at, [sequence]) WHERE state = N'pending' AND [key] = N''`, true),
        createIndex(n.inbox, `${i}_aggregate_head_idx`, `INDEX {index} ON {table} (source, aggregate_id, [sequence]) WHERE ${open} AND aggregate_id IS NOT NULL AND consumption = N'push'`, true),
        createIndex(n.inbox, `${i}_aggregate_processing_idx`, `INDEX {index} ON {table} (source, aggregate_id) WHERE state = N'processing' AND consumption = N'push' AND aggregate_id IS NOT NULL`, true),
        createIndex(n.inbox, `${i}_push_free_idx`, `INDEX {index} ON {table} (scheduled_at, [sequence]) WHERE state = N'pending' AND consumption = N'push' AND aggregate_id IS NULL`, true),
        createIndex(n.inbox, `${i}_pull_open_idx`, `INDEX {index} ON {table} (source, scheduled_at, created_at, id) INCLUDE (source_bytes, aggregate_id) WHERE ${open} AND consumption = N'pull'`, true),
        createIndex(n.inbox, `${i}_pull_busy_idx`, `INDEX {index} ON {table} (source, aggregate_id) INCLUDE (lease_expires_at, source_bytes) WHERE state = N'processing' AND consumption = N'pull'`, true),
        createIndex(n.inbox, `${i}_pull_head_idx`, `INDEX {index} ON {table} (source, aggregate_id, [sequence]) INCLUDE (source_bytes) WHERE ${open} AND consumption = N'pull'`, true),
        createIndex(n.inbox, `${i}_pull_retry_idx`, `INDEX {index} ON {table} (source, scheduled_at, created_at, id) INCLUDE (source_bytes, aggregate_id) WHERE ${open} AND consumption = N'pull' AND attempt > 0`, true),
      ];
    },
  },
  {
    version: 7,
    name: 'trace context of a row',
    // The writer's trace context as a small JSON object (the same column as on PostgreSQL); NULL
    // for rows written without one and for every row written before this version.
    statements: (n) => [n.outbox, n.inbox].map((table) => `IF COL_LENGTH(${literal(table)}, N'trace_context') IS NULL
  ALTER TABLE ${table} ADD trace_context NVARCHAR(1024) NULL;`),
  },
  {
    version: 8,
    name: 'max_attempts counts deliveries',
    // `max_attempts` was the number of retries (5: six deliveries); it is now the number of
    // deliveries. Every row that can still be delivered, or replayed, keeps the deliveries it was
    // written for: `max_attempts + 1`. Sent rows are left as they are (reading them all would
    // rewrite the table); one replayed later gets one delivery fewer than it was written for.
    statements: (n) => [`UPDATE ${n.outbox} SET max_attempts = max_attempts + 1 WHERE state IN (N'pending', N'processing', N'dead');`],
  },
  {
    version: 11,
    name: 'no lock escalation on the outbox and inbox; one row in flight per key and per push aggregate as an index; empty aggregate ids',
    // SQL Server only (PostgreSQL has no lock escalation, and its migration 6 made the same
    // indexes). One statement that writes 5,000 or more rows of a table (an application enqueueing
    // a large batch in one INSERT) would escalate its row locks to a table lock, and every claim
    // and every other enqueue would wait until it commits; with escalation disabled the statement
    // keeps its row and index-key locks (about 100 bytes of lock memory each, so a 100,000-row
    // INSERT holds tens of megabytes until it commits). The unique indexes back the outbox's and
    // the relay's one-row-in-flight rules (a claim they refuse is run again); the empty-aggregate
    // index serves the relay's branch of rows whose aggregate id is '' (no aggregate, as on PostgreSQL).
    // Order: every statement here keeps a table lock until the migrate transaction commits (the
    // ALTER TABLE a schema-modification lock from its start, an online index build its final
    // S or Sch-M lock; "Guidelines for online index operations",
    // learn.microsoft.com/sql/relational-databases/indexes/guidelines-for-online-index-operations).
    // The ALTER TABLEs come last, so no index is built behind their locks, and the outbox's index
    // after the inbox's: the outbox, where applications enqueue, is locked only for the last
    // statements, not through the inbox's builds.
    statements: (n) => [
      createIndex(n.inbox, `${n.inboxTable}_push_in_flight_idx`, `UNIQUE INDEX {index} ON {table} (source, aggregate_id) WHERE state = N'processing' AND consumption = N'push' AND aggregate_id IS NOT NULL AND aggregate_id <> N''`, true),
      createIndex(n.inbox, `${n.inboxTable}_push_empty_aggregate_idx`, `INDEX {index} ON {table} (scheduled_at, [sequence]) WHERE state = N'pending' AND consumption = N'push' AND aggregate_id = N''`, true),
      createIndex(n.outbox, `${n.outboxTable}_key_in_flight_idx`, `UNIQUE INDEX {index} ON {table} ([key]) WHERE state = N'processing' AND [key] IS NOT NULL AND [key] <> N''`, true),
      ...[n.outbox, n.inbox].map((table) => disableLockEscalation(table)),
    ],
  },
  {
    version: 12,
    name: 'expired push leases indexed apart from pull leases',
    // The relay's reclaim moves expired push rows only; through the lease index it also read every
    // expired pull row (left to the pull claim), once per chunk. SQL Server only.
    statements: (n) => [
      createIndex(n.inbox, `${n.inboxTable}_push_lease_idx`, `INDEX {index} ON {table} (lease_expires_at) WHERE state = N'processing' AND consumption = N'push'`, true),
    ],
  },
];

/** Columns every table must have: used by `schemaVerify` to print the exact ALTER TABLE to run. */
export function mssqlExpectedColumns(n: MssqlNames): Array<{ table: string; qualified: string; columns: Array<{ name: string; ddl: string }> }> {
  const common = {
    state: "NVARCHAR(50) NOT NULL DEFAULT N'pending'",
    time: 'DATETIME2(7) NOT NULL DEFAULT SYSUTCDATETIME()',
    nullTime: 'DATETIME2(7) NULL',
    headers: "NVARCHAR(MAX) NOT NULL DEFAULT N'{}'",
  };
  return [
    {
      table: n.outboxTable,
      qualified: n.outbox,
      columns: [
        { name: 'id', ddl: 'UNIQUEIDENTIFIER NOT NULL DEFAULT NEWID()' },
        { name: 'topic', ddl: 'NVARCHAR(255) NOT NULL' },
        { name: 'key', ddl: 'NVARCHAR(255) NULL' },
        { name: 'payload', ddl: 'NVARCHAR(MAX) NOT NULL' },
        { name: 'headers', ddl: common.headers },
        { name: 'state', ddl: common.state },
        { name: 'attempt', ddl: 'INT NOT NULL DEFAULT 0' },
        { name: 'max_attempts', ddl: 'INT NOT NULL DEFAULT 5' },
        { name: 'scheduled_at', ddl: common.time },
        { name: 'created_at', ddl: common.time },
        { name: 'updated_at', ddl: common.time },
        { name: 'claimed_at', ddl: common.nullTime },
        { name: 'claim_token', ddl: 'UNIQUEIDENTIFIER NULL' },
        { name: 'lease_expires_at', ddl: common.nullTime },
        { name: 'last_error', ddl: 'NVARCHAR(MAX) NULL' },
        { name: 'sequence', ddl: `BIGINT NOT NULL DEFAULT (NEXT VALUE FOR ${n.outboxSequence})` },
        { name: 'replay_count', ddl: 'INT NOT NULL DEFAULT 0' },
        { name: 'trace_context', ddl: 'NVARCHAR(1024) NULL' },
      ],
    },
    {
      table: n.inboxTable,
      qualified: n.inbox,
      columns: [
        { name: 'id', ddl: 'UNIQUEIDENTIFIER NOT NULL DEFAULT NEWID()' },
        { name: 'source', ddl: 'NVARCHAR(255) NOT NULL' },
        { name: 'idempotency_key', ddl: 'NVARCHAR(255) NOT NULL' },
        { name: 'aggregate_id', ddl: 'NVARCHAR(255) NULL' },
        { name: 'event_type', ddl: 'NVARCHAR(255) NULL' },
        { name: 'payload', ddl: 'NVARCHAR(MAX) NOT NULL' },
        { name: 'headers', ddl: common.headers },
        { name: 'correlation_id', ddl: 'NVARCHAR(128) NULL' },
        { name: 'consumption', ddl: "NVARCHAR(10) NOT NULL DEFAULT N'push'" },
        { name: 'state', ddl: common.state },
        { name: 'attempt', ddl: 'INT NOT NULL DEFAULT 0' },
        { name: 'scheduled_at', ddl: common.time },
        { name: 'created_at', ddl: common.time },
        { name: 'updated_at', ddl: common.time },
        { name: 'processed_at', ddl: common.nullTime },
        { name: 'claimed_at', ddl: common.nullTime },
        { name: 'claim_token', ddl: 'UNIQUEIDENTIFIER NULL' },
        { name: 'lease_expires_at', ddl: common.nullTime },
        { name: 'last_error', ddl: 'NVARCHAR(MAX) NULL' },
        { name: 'sequence', ddl: `BIGINT NOT NULL DEFAULT (NEXT VALUE FOR ${n.inboxSequence})` },
        // SQL Server only: byte lengths that make the deduplication trailing-space-exact (migration 5).
        { name: 'source_bytes', ddl: 'AS CAST(DATALENGTH([source]) AS INT) PERSISTED' },
        { name: 'idempotency_key_bytes', ddl: 'AS CAST(DATALENGTH([idempotency_key]) AS INT) PERSISTED' },
        { name: 'trace_context', ddl: 'NVARCHAR(1024) NULL' },
      ],
    },
    {
      table: n.maintenanceTable,
      qualified: n.maintenance,
      columns: [
        { name: 'name', ddl: 'NVARCHAR(255) NOT NULL' },
        { name: 'last_run_at', ddl: "DATETIME2(7) NOT NULL DEFAULT '0001-01-01T00:00:00'" },
      ],
    },
  ];
}

/** Wait of the migrate lock: other migrations finish in seconds; below the 30 s request timeout. */
export const MIGRATE_LOCK_WAIT_MS = 20_000;

/** First statement of the migrate transaction: `queuebox_migrate`, exclusive, owned by the transaction. */
export const MIGRATE_LOCK_SQL = `DECLARE @v_lock_result INT;
EXEC @v_lock_result = sp_getapplock @Resource = N'queuebox_migrate', @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = ${MIGRATE_LOCK_WAIT_MS};
IF @v_lock_result < 0
  THROW 51000, N'queuebox: migrate lock not granted; another migrate is running', 1;`;

/** Creates the schema (when missing), then the migrations table: two batches, so the second compiles after the first ran. */
export function migrationsTableSql(n: MssqlNames): string[] {
  return [
    `IF SCHEMA_ID(N'${n.schema}') IS NULL EXEC(N'CREATE SCHEMA ${q(n.schema)}');`,
    `IF OBJECT_ID(N'${n.migrations}', N'U') IS NULL
CREATE TABLE ${n.migrations} (
  version INT NOT NULL PRIMARY KEY,
  name NVARCHAR(255) NOT NULL,
  applied_at DATETIME2(7) NOT NULL DEFAULT SYSUTCDATETIME()
);`,
  ];
}
