/**
 * The driver seam: every database operation QueueBox performs, named entity + verb.
 *
 * Worker logic (outbox poller, inbox relay, pull client, operations) calls only these methods and
 * never writes SQL. Each dialect (`postgres/`, `sqlserver/`) implements the same names, and one
 * conformance suite (`test/conformance/`) runs against every dialect available.
 *
 * Invariants every implementation keeps (seed: claims-and-leases):
 * - Times that decide ownership come from the database clock (`clock_timestamp()`,
 *   `SYSUTCDATETIME()`), never from the caller's clock; a fence compares with the clock now, never
 *   with the transaction start. A granted or renewed lease may start earlier than the write (the
 *   PostgreSQL driver starts it at its transaction's start), never later: the caller sized it to
 *   the time its invocation had left when it sent the statement.
 * - A claim sets `state = 'processing'`, a fresh random `claim_token` per row,
 *   `lease_expires_at = db clock + leaseMs`, `claimed_at = db clock`.
 * - Every finishing write (sent, retry, dead, processed, renew) is fenced on id + `processing`
 *   + token + `lease_expires_at > db clock`, and reports which rows it changed. A row missing
 *   from the result lost its claim; that is an outcome, not an exception.
 * - Batch operations take one round trip.
 * - No session state: no session advisory locks, no LISTEN, no named prepared statements.
 */
import type { CallerTransaction } from './caller-transaction.ts';
import type { TraceContext } from '../observability/trace-context.ts';

/** A claimed row's ownership: the row id and the token of this claim. */
export interface ClaimRef {
  id: string;
  token: string;
}

/** Outbox states. */
export type OutboxState = 'pending' | 'processing' | 'sent' | 'dead';
/** Inbox states. */
export type InboxState = 'pending' | 'processing' | 'processed' | 'dead';

/**
 * A message as the application enqueues it: the parameter of `enqueue` from `queuebox` and from
 * every `queuebox/<library>`.
 */
export interface EnqueueMessage {
  topic: string;
  /** A plain object, or an object whose `toJSON` returns one: what it serializes to is stored. */
  payload: Record<string, unknown>;
  key?: string | null;
  headers?: Record<string, string>;
  /** Absolute time the row becomes due; default: now. */
  scheduledAt?: Date;
  /** Delay from now (database clock) instead of `scheduledAt`. */
  delayMs?: number;
  /** Deliveries of the row, the first included (`max_attempts`); then it is `dead`. */
  maxAttempts?: number;
  /** Caller-chosen id (UUID); default: random. An id already in the table is refused (`UniqueViolationError` naming `message.id`). */
  id?: string;
}

/** A message as QueueBox writes it to the outbox: an `EnqueueMessage`, and what QueueBox sets itself. */
export interface OutboxMessageInput extends EnqueueMessage {
  /** `payload` as JSON text (the same object, valid JSON); stored instead of `JSON.stringify(payload)`, so numbers keep every digit. The inbox relay sets it. */
  payloadText?: string;
  /** Trace context stored with the row; set by QueueBox (`enqueue` captures the caller's, the relay copies the inbox row's), not by the caller. */
  trace?: TraceContext | null;
}

/**
 * The rows of an outbox claim, in claim order. `exhausted` (PostgreSQL; unset where the driver
 * cannot tell, and always on SQL Server): the claim took every row that could move — of the
 * oldest due rows its window read, or of the heads of every open key — so a claim as large again
 * would have found no more. The pass caps its claim size on it (`learnCeiling`), so that claims
 * of a table with few open keys leave rows for the next claim.
 */
export type OutboxClaimedRows = OutboxRow[] & { exhausted?: boolean };

/** An outbox row as a claim returns it. */
export interface OutboxRow {
  id: string;
  topic: string;
  key: string | null;
  /** The payload parsed (on first read); numbers beyond double precision are rounded here, never in `payloadText`. */
  payload: Record<string, unknown>;
  /** The payload as stored, JSON text: what destinations deliver, every digit kept. */
  payloadText: string;
  headers: Record<string, string>;
  /** Attempts already spent: failed deliveries and lost leases (0 on the first delivery). */
  attempt: number;
  maxAttempts: number;
  sequence: string;
  /** Times the row was replayed; part of the FIFO deduplication id after a replay. */
  replayCount: number;
  createdAt: Date;
  claimToken: string;
  leaseExpiresAt: Date;
  /** Trace context stored with the row (validated again when read); null when none. */
  trace?: TraceContext | null;
}

/** A fenced retry: back to `pending`, `attempt + 1`, due after `delayMs` on the database clock. */
export interface RetryItem extends ClaimRef {
  delayMs: number;
  error: string;
}

/** A fenced dead-letter write. */
export interface DeadItem extends ClaimRef {
  error: string;
}

/** Result of a reclaim step. */
export interface ReclaimResult {
  /** False when the shared throttle said another invocation reclaimed recently. */
  ran: boolean;
  /** Rows returned from `processing` to `pending` (the lost lease counted as a failed attempt). */
  reclaimed: number;
  /** Rows whose lease expired during their last attempt: now `dead`. */
  dead: number;
  /**
   * Set when the reclaim stopped after it had committed part of its work (PostgreSQL: it commits
   * chunk by chunk): the error that ended the chunk after those — cancelled at the deadline, not
   * sent for want of time, or any other failure. `reclaimed` and `dead` are the committed chunks'
   * (the rows they made `dead` went dead, and must be counted); the expired rows left are still
   * `processing`, for a later reclaim. Absent when the reclaim saw every expired row it could take.
   */
  cutBy?: unknown;
}

/**
 * What a stats read covers: every state (status), or only the backlog (`pendingOnly`: the passes'
 * gauges, read at the end of every pass, so it reads the pending rows' index, not the table).
 */
export interface StatsScope {
  pendingOnly?: boolean;
  /**
   * Read only when no caller (any invocation, any container) read this table's stats with
   * `onceEveryMs` in the last `onceEveryMs` ms, on the database clock: a gate row in the
   * maintenance table (`gauges:<table>`), opened as the reclaim's is. When it stays shut nothing
   * is counted and the result is `skipped`. The passes' backlog gauges use it, so that passes
   * running side by side (scale-out) count a large backlog once per interval, not once each.
   */
  onceEveryMs?: number;
}

/** Counts and ages for status, metrics and alarms. With `pendingOnly`, `counts` holds only `pending`. */
export interface TableStats {
  counts: Record<string, number>;
  /** Age of the oldest due `pending` row in seconds (0 when none). */
  oldestPendingAgeSeconds: number;
  /** True when `onceEveryMs` kept the read shut (another caller read within the interval): nothing was counted. */
  skipped?: boolean;
}

/** The result of a stats read that `StatsScope.onceEveryMs` kept shut. */
export const SKIPPED_STATS: Readonly<TableStats> = Object.freeze({ counts: Object.freeze({}), oldestPendingAgeSeconds: 0, skipped: true });

/** The name of the gate row of `table`'s gauges in the maintenance table (`StatsScope.onceEveryMs`). */
export function gaugeGateName(table: string): string {
  return `gauges:${table}`;
}

/** Filter of a replay; at least one field must be set. */
export interface ReplayFilter {
  ids?: string[];
  topics?: string[];
  /** Topic patterns routed to this destination (resolved by the caller from the routes). */
  topicPatterns?: string[];
  createdFrom?: Date;
  createdTo?: Date;
  /** Rows whose `last_error` starts with this text (a group of the console's dead rows). */
  lastErrorPrefix?: string;
  /** States to move; default both `sent` and `dead`. Only `sent` and `dead` are allowed. */
  states?: Array<'sent' | 'dead'>;
  /**
   * Only these rows, and each only while its `updated_at` (to the millisecond, as a preview read
   * it) is unchanged: a row replayed elsewhere and finished again since is left alone. Checked in
   * the replay statement itself, so nothing can change between the check and the move.
   */
  asRead?: Array<{ id: string; updatedAtMs: number }>;
  /**
   * A hard bound (1 to `REPLAY_MAX_ROWS_BOUND`, `replay-bound.ts`): the replay locks the matching rows and moves them
   * only when at most this many match at that moment; otherwise it moves none and throws
   * `ReplayLimitError`. One statement (one transaction), so rows that die meanwhile cannot
   * slip past the bound.
   */
  maxRows?: number;
}

/** One row a replay would move, as a preview shows it (no payload: previews are for eyes and logs). */
export interface ReplayPreviewRow {
  id: string;
  topic: string;
  key: string | null;
  state: 'sent' | 'dead';
  attempt: number;
  lastError: string | null;
  createdAt: Date;
  updatedAt: Date;
}

/**
 * Filter of an inbox requeue (dead rows only, push and pull); at least one of ids, sources,
 * created range or `lastErrorPrefix` must be set. `consumption` narrows, never widens.
 * `asRead` and `maxRows` mean what they mean on a `ReplayFilter`.
 */
export interface InboxReplayFilter {
  ids?: string[];
  /** Exact source names. */
  sources?: string[];
  consumption?: 'push' | 'pull';
  /** Inclusive lower bound of `created_at` (when the row was received). */
  createdFrom?: Date;
  /** Exclusive upper bound of `created_at`. */
  createdTo?: Date;
  lastErrorPrefix?: string;
  asRead?: Array<{ id: string; updatedAtMs: number }>;
  maxRows?: number;
}

/** One dead inbox row an inbox requeue would move, as a preview shows it (no payload). */
export interface InboxReplayPreviewRow {
  id: string;
  source: string;
  aggregateId: string | null;
  consumption: 'push' | 'pull';
  state: 'dead';
  attempt: number;
  lastError: string | null;
  createdAt: Date;
  updatedAt: Date;
}

/** A message as a receiver stores it in the inbox. */
export interface InboxMessageInput {
  source: string;
  idempotencyKey: string;
  aggregateId?: string | null;
  eventType?: string | null;
  payload: unknown;
  /** The payload as the sender wrote it (valid JSON); stored instead of `JSON.stringify(payload)`, so large numbers keep their digits. */
  payloadText?: string;
  headers?: Record<string, string>;
  correlationId?: string | null;
  consumption: 'push' | 'pull';
  /** Delay before the row becomes due (database clock). */
  delayMs?: number;
  /** Store directly as `dead` with this reason (a message rejected at receipt, non-HTTP source). */
  deadReason?: string;
  /** The sender's trace context (validated); the relay copies it to the outbox row. */
  trace?: TraceContext | null;
}

/** Outcome of an inbox insert: a new row, or the existing row of the same (source, key). */
export interface InboxInsertResult {
  id: string;
  duplicate: boolean;
}

/** An inbox row as the relay or a pull claim returns it. */
export interface InboxRow {
  id: string;
  source: string;
  idempotencyKey: string;
  aggregateId: string | null;
  eventType: string | null;
  /** The payload parsed; numbers beyond double precision are rounded here, never in `payloadText`. */
  payload: unknown;
  /** The payload as stored, JSON text, every digit kept; what the relay forwards to the outbox. */
  payloadText: string;
  headers: Record<string, string>;
  correlationId: string | null;
  attempt: number;
  createdAt: Date;
  claimToken: string;
  leaseExpiresAt: Date;
  /** The sender's trace context (validated again when read; the relay forwards it); null when none. */
  trace?: TraceContext | null;
}

/** One relay forward: the outbox row to insert and the fenced `processed` mark, in one transaction. */
export interface InboxForwardItem extends ClaimRef {
  outbox: OutboxMessageInput;
  /**
   * The key of the row's aggregate under the other `inbox.relay.outboxKey` form, and its source.
   * While an open (`pending`/`processing`) outbox row relayed from that source (header
   * `x-source`) has this key, the outbox row is written with it instead of `outbox.key`: the
   * aggregate's rows keep one key, and so their order, across a change of the setting (the
   * upgrade to scoped keys included). Both drivers apply it (PostgreSQL and SQL Server).
   */
  keyWhileOpen?: { key: string; source: string };
}

/** Age-based deletion of finished rows. */
export interface DeleteFinishedParams {
  /** States whose rows may be deleted; never `pending`/`processing`. */
  state: 'sent' | 'dead' | 'processed';
  olderThanMs: number;
  limit: number;
  /** Inbox only: rows of these sources are deleted only once also older than `olderThanMs` here (a replay horizon). */
  keep?: { sources: readonly string[]; olderThanMs: number };
}

/**
 * A scheduled function whose finished passes are recorded (`passRecordFinished`): the outbox
 * poller, the inbox relay, the reclaim function.
 */
export type PassWorker = 'outboxPoller' | 'inboxRelay' | 'reclaim';

/** Every `PassWorker`, in the order status lists them. */
export const PASS_WORKERS: readonly PassWorker[] = ['outboxPoller', 'inboxRelay', 'reclaim'];

/** A worker that can start passes of itself (scale-out). */
export type ScaleOutWorker = 'outboxPoller' | 'inboxRelay';

/** A held scale-out slot: its number and the token (its lease expiry, microseconds since 1970, as text) that proves who holds it. */
export interface ScaleOutSlot {
  slot: number;
  token: string;
}

/** When a worker's last pass finished, on the database clock, and how long ago that was (seconds). */
export interface PassFinished {
  worker: PassWorker;
  finishedAt: Date;
  ageSeconds: number;
}

/** Per-state counts of one table plus the dead rows' latest errors (status command). */
export interface DeadRowSummary {
  id: string;
  topicOrSource: string;
  lastError: string | null;
  updatedAt: Date;
}

/**
 * A transaction handle that belongs to the caller: a `pg` client inside `BEGIN`, or an `mssql`
 * `Transaction`. Enqueue and pull completion run inside it, so they commit or roll back with the
 * caller's business change.
 */
export type { CallerTransaction };

/** What `migrate` did. */
export interface MigrateResult {
  /** Numbered migrations applied now. */
  applied: number[];
  /**
   * PostgreSQL: the claim functions (names) created, replaced (QueueBox's name, another
   * definition), kept, dropped, and stale ones this role may not drop.
   */
  claimFunctions?: { created: string[]; replaced: string[]; kept: string[]; dropped: string[]; notDropped: string[] };
}

/** Where a driver logs its warnings (the Powertools logger fits). */
export interface DriverLogger {
  warn(message: string, attributes: Record<string, unknown>): void;
}

/** Every operation QueueBox performs on its database. */
export interface Driver extends ConsoleReads {
  readonly dialect: 'postgres' | 'sqlserver';

  /** Applies pending numbered migrations under a transaction-scoped lock; idempotent. */
  migrate(): Promise<MigrateResult>;
  /**
   * What `migrate` would still change, one line each naming it (a migration not applied, a missing
   * column, PostgreSQL: a claim function missing or not QueueBox's own, a schema open to other
   * roles); empty when up to date. Changes nothing.
   */
  migrateCheck(): Promise<string[]>;
  /**
   * The logger for the driver's own warnings (PostgreSQL: a claim function found unusable, so
   * claims send their statement). Without one they are not logged.
   */
  useLogger?(logger: DriverLogger): void;
  /** Throws `SchemaMismatchError` with the exact DDL when a column is missing. */
  schemaVerify(): Promise<void>;
  /** Database clock now (for tests and status). */
  clockNow(): Promise<Date>;
  /** Ends the pool. */
  close(): Promise<void>;

  // ---- outbox ----
  /** Inserts one row inside the caller's transaction; returns its id. */
  outboxInsert(tx: CallerTransaction, message: OutboxMessageInput, defaults: { maxAttempts: number }): Promise<string>;
  /**
   * Claims up to `limit` due rows, keyless rows freely, ordered by `scheduled_at, sequence`; of a
   * key, its head by `sequence` and — with `rowsPerKey` above 1 (PostgreSQL; unset: the driver's configuration, default `DEFAULT_ROWS_PER_KEY`) — up to
   * `rowsPerKey - 1` of the rows right after it, all due and pending and none past a keyless row
   * the claim left out, under the head's claim token. Another claim never holds rows of a key
   * meanwhile. SQL Server takes the head only.
   */
  outboxClaimMany(params: { limit: number; leaseMs: number; rowsPerKey?: number }): Promise<OutboxClaimedRows>;
  /** Fenced lease renewal; returns ids renewed. */
  outboxRenewMany(params: { claims: ClaimRef[]; leaseMs: number }): Promise<string[]>;
  /** Fenced `sent`; returns ids changed. */
  outboxMarkSentMany(params: { claims: ClaimRef[] }): Promise<string[]>;
  /** Fenced retry; returns ids changed. */
  outboxRetryMany(params: { items: RetryItem[] }): Promise<string[]>;
  /** Fenced `dead`; returns ids changed. */
  outboxMarkDeadMany(params: { items: DeadItem[] }): Promise<string[]>;
  /**
   * Fenced release of claimed rows that no destination call was offered (the pass stopped before
   * their call started): back to `pending`, attempt unchanged (no delivery was attempted); returns
   * ids changed.
   */
  outboxReleaseMany?(params: { claims: ClaimRef[] }): Promise<string[]>;
  /**
   * Returns expired `processing` rows to `pending` with `attempt + 1` (the lost lease is a failed
   * delivery), or to `dead` when it was the row's last (`attempt + 1 >= max_attempts`), with a
   * `last_error` that says the lease expired. A claim of several rows of a key (`rowsPerKey`,
   * PostgreSQL) had at most one delivery of the key in flight: only its first row still
   * `processing` is charged; the key's later rows in it go back with their attempt unchanged.
   * When `throttleMs` is set, runs only if no reclaim of this table ran within `throttleMs` (gate
   * kept in the database).
   */
  outboxReclaimExpired(params: { throttleMs?: number }): Promise<ReclaimResult>;
  outboxStats(scope?: StatsScope): Promise<TableStats>;
  outboxDeadList(params: { limit: number }): Promise<DeadRowSummary[]>;
  /** Moves matching `sent`/`dead` rows to `pending`, resetting attempt, schedule, error, claim. */
  outboxReplay(filter: ReplayFilter): Promise<number>;
  /** Counts the rows `outboxReplay(filter)` would move now and returns the oldest `limit` of them; changes nothing. */
  outboxReplayPreview(params: { filter: ReplayFilter; limit: number }): Promise<{ count: number; sample: ReplayPreviewRow[] }>;
  outboxDeleteFinished(params: DeleteFinishedParams): Promise<number>;

  // ---- inbox ----
  /** Stores a message once per (source, idempotency key). */
  inboxInsert(message: InboxMessageInput, tx?: CallerTransaction): Promise<InboxInsertResult>;
  /**
   * Claims push rows under the relay claim lock, at most one per aggregate — an aggregate is
   * `(source, aggregate_id)`; an empty aggregate id is none — skipping aggregates with a
   * `processing` row. Never touches pull rows.
   */
  inboxClaimPushMany(params: { limit: number; leaseMs: number }): Promise<InboxRow[]>;
  inboxRenewMany(params: { claims: ClaimRef[]; leaseMs: number }): Promise<string[]>;
  /** One transaction: insert the outbox row, fenced mark `processed`; false (rolled back) when the claim was lost. */
  inboxForward(item: InboxForwardItem, defaults: { maxAttempts: number }): Promise<boolean>;
  /**
   * `inboxForward` for a batch, in one statement: every item whose claim holds is marked
   * `processed` with its outbox row (inserted in the items' order); returns their ids; an error
   * changes nothing. Optional: PostgreSQL has it; without it (SQL Server) the relay forwards row
   * by row with `inboxForward`.
   */
  inboxForwardMany?(items: InboxForwardItem[], defaults: { maxAttempts: number }): Promise<string[]>;
  inboxRetryMany(params: { items: RetryItem[] }): Promise<string[]>;
  inboxMarkDeadMany(params: { items: DeadItem[] }): Promise<string[]>;
  /** Fenced release of claimed push rows the relay wrote nothing for (it stopped first): `pending`, attempt unchanged; ids changed. */
  inboxReleaseMany?(params: { claims: ClaimRef[] }): Promise<string[]>;
  /** `outboxReclaimExpired` for push rows; `maxAttempts` is the relay's (rows carry none). */
  inboxReclaimExpired(params: { throttleMs?: number; maxAttempts: number }): Promise<ReclaimResult>;
  /** Counts per state and the oldest due pending age, push and pull rows alike (status); with `pendingOnly`, both of push rows only (the relay's backlog). */
  inboxStats(scope?: StatsScope): Promise<TableStats>;
  inboxDeadList(params: { limit: number }): Promise<DeadRowSummary[]>;
  inboxDeleteFinished(params: DeleteFinishedParams): Promise<number>;
  /**
   * Moves matching `dead` rows (push and pull) back to `pending`: attempt 0, due now, error,
   * claim and `processed_at` cleared; `id` and `sequence` kept, so a requeued row is again the
   * head of its aggregate and the aggregate's later open rows wait for it (claims take the open
   * row of lowest `sequence`). Without `maxRows` it moves in `sequence` order.
   */
  inboxReplay(filter: InboxReplayFilter): Promise<number>;
  /** Counts the rows `inboxReplay(filter)` would move now and returns the oldest `limit` of them; changes nothing. */
  inboxReplayPreview(params: { filter: InboxReplayFilter; limit: number }): Promise<{ count: number; sample: InboxReplayPreviewRow[] }>;

  // ---- passes (heartbeat) ----
  /**
   * Records that a pass of `worker` finished now (database clock): one upsert of the worker's row
   * (`pass:<worker>:<outbox table>`) in the maintenance table, once per pass, never per message.
   */
  passRecordFinished(params: { worker: PassWorker }): Promise<void>;
  /** The last finished pass of each worker that has one (any order); reads the maintenance table only. */
  passListFinished(): Promise<PassFinished[]>;

  // ---- scale-out (passes started by a pass: lib/runtime/scale-out.ts) ----
  /** Due `pending` outbox rows (`scheduled_at` reached), counted up to `limit` (the count stops there; cost follows `limit`, not the table). */
  outboxCountDue(params: { limit: number }): Promise<number>;
  /** `outboxCountDue` for the relay's push rows. */
  inboxCountDue(params: { limit: number }): Promise<number>;
  /**
   * Takes up to `want − held` free scale-out slots of `worker` among `1..slots`, where `held` is
   * the slots already held: one maintenance row per slot (`scale-out:<worker>:<outbox table>:<n>`)
   * whose `last_run_at` is its lease expiry on the database clock; a slot is free when it has no
   * row or its lease has passed. Each taken slot's lease ends `leaseMs` from now. Concurrent
   * callers never take the same slot (the upsert re-checks the expiry on the row's latest
   * version), so at most `slots` are held at once, whatever the callers.
   */
  scaleOutAcquire(params: { worker: ScaleOutWorker; slots: number; want: number; leaseMs: number }): Promise<ScaleOutSlot[]>;
  /**
   * The started pass takes over its slot: when the slot still holds `token` and its lease has not
   * passed, the lease is set to end `leaseMs` from now and the new token returned; otherwise
   * (a duplicate delivery, or an event that waited past the lease) `undefined`, changing nothing.
   */
  scaleOutStart(params: { worker: ScaleOutWorker; slot: ScaleOutSlot; leaseMs: number }): Promise<ScaleOutSlot | undefined>;
  /** Frees the slot when it still holds `token` (its row is deleted); false when another holds it now. */
  scaleOutRelease(params: { worker: ScaleOutWorker; slot: ScaleOutSlot }): Promise<boolean>;

  // ---- pull ----
  /**
   * One statement: due `pending` rows and expired `processing` rows of one pull source, at most
   * one per aggregate, skipping aggregates under a live lease, ordered by
   * `scheduled_at, created_at, id`; committed before returning. An expired row is claimed with
   * `attempt + 1` (its lost lease is a failed attempt) and a `last_error` saying so; the worker
   * dead-letters a row whose `attempt` reached its `maxAttempts` without running the handler.
   */
  pullClaimMany(params: { source: string; limit: number; leaseMs: number }): Promise<InboxRow[]>;
  /** Fenced; true when exactly one row changed. */
  pullRenew(params: ClaimRef & { leaseMs: number }): Promise<boolean>;
  /** Fenced `processed` inside the caller's transaction; false means: roll the caller back. */
  pullComplete(tx: CallerTransaction, claim: ClaimRef): Promise<boolean>;
  pullRetry(params: RetryItem): Promise<boolean>;
  pullMarkDead(params: DeadItem): Promise<boolean>;
  /** Fenced return of a claimed, never-started row to `pending`; attempt and schedule unchanged. */
  pullRelease(params: ClaimRef): Promise<boolean>;
}

// ---- operator console (read-only, each statement bounded: see docs/console.md) ----

/**
 * The most inbox sources with open pull rows the console's oldest pending age looks at (the first
 * by name): each costs a few index probes (about 25 µs on PostgreSQL), so the read stays within
 * tens of ms however many sources a table holds (22,000 sources took 522 ms unbounded). Sources
 * are named in the configuration and by the application's pull workers: a handful, as a rule.
 */
export const PULL_AGE_SOURCE_LIMIT = 1000;

/** Per-state counts (each capped at `countCap`), the backlog's age and recent throughput of one table. */
export interface ConsoleStateCounts {
  /** Rows per state; a value equal to `countCap` means "at least that many". */
  counts: Record<string, number>;
  countCap: number;
  /** Age of the oldest due `pending` row in seconds (0 when none; for the inbox, push and pull rows, the latter of the first `PULL_AGE_SOURCE_LIMIT` sources with open pull rows). */
  oldestPendingAgeSeconds: number;
  /** Rows per finished state whose `updated_at` is within the last hour (capped at `countCap`). */
  finishedLastHour: Record<string, number>;
  /** The same within the last minute. */
  finishedLastMinute: Record<string, number>;
}

/** A row in `processing`, with its lease left on the database clock (negative: expired). */
export interface ConsoleClaim {
  id: string;
  /** Topic (outbox) or source (inbox). */
  label: string;
  /** Key (outbox) or aggregate id (inbox). */
  key: string | null;
  attempt: number;
  claimedAt: Date | null;
  leaseExpiresAt: Date | null;
  leaseLeftMs: number;
}

/**
 * The head row of a key (outbox) or aggregate (inbox) that is not moving: its lease expired, it
 * waits for a retry or a future schedule, or it failed `poisonAttempts` times or more.
 */
export interface ConsoleBlockedHead extends ConsoleClaim {
  state: string;
  /** Outbox `max_attempts`; null on the inbox (the relay's setting applies). */
  maxAttempts: number | null;
  scheduledAt: Date;
  /** `scheduled_at` minus the database clock (positive: in the future). */
  dueInMs: number;
  lastError: string | null;
  updatedAt: Date;
  /** Open rows of the same key behind this one, capped at `waitingCap`. */
  waitingBehind: number;
}

/** One stored row with every column the console shows; times are the database's. */
export interface ConsoleRow {
  id: string;
  label: string;
  key: string | null;
  state: string;
  attempt: number;
  maxAttempts: number | null;
  payload: unknown;
  headers: Record<string, string>;
  sequence: string;
  scheduledAt: Date;
  createdAt: Date;
  updatedAt: Date;
  claimedAt: Date | null;
  leaseExpiresAt: Date | null;
  lastError: string | null;
  /** Outbox: times replayed; inbox: null. */
  replayCount: number | null;
  /** Inbox only: when it was processed. */
  processedAt: Date | null;
  /** Table-specific columns (inbox: idempotency key, event type, correlation id, consumption). */
  details: Record<string, string | null>;
  /**
   * The stored `trace_context` as read, not validated (PostgreSQL: the parsed `jsonb`; SQL Server:
   * its JSON text); null when the row has none. The console validates it before showing any of it.
   */
  traceContext: unknown;
}

/** Filter and page of a dead-row search; `to` is exclusive, `scanLimit` bounds the rows read. */
export interface ConsoleDeadQuery {
  /** Exact topic (outbox) or source (inbox). */
  label?: string;
  /** Outbox: `updated_at`; inbox: `created_at` (the indexed time of each table). */
  from?: Date;
  to?: Date;
  /** Only rows after this one in the page order (older, or as old with a lower id): a previous page's `next`. */
  before?: ConsoleDeadCursor;
  limit: number;
  scanLimit: number;
}

/** A position in the dead rows' order: a row's time exactly as stored (ISO-8601 UTC text, sub-millisecond digits kept) and its id. */
export interface ConsoleDeadCursor {
  at: string;
  id: string;
}

/**
 * A page of dead rows, newest first. `scanCapped`: the search stopped after `scanLimit` rows.
 * `next`: where the following page starts (the last row shown), when more rows match.
 * Payloads are read for the rows returned only.
 */
export interface ConsoleDeadPage {
  rows: ConsoleRow[];
  more: boolean;
  scanCapped: boolean;
  next?: ConsoleDeadCursor;
}

/** What a dead-row grouping reads: the newest `scanLimit` dead rows, grouped; the `limit` largest groups. */
export interface ConsoleDeadGroupQuery {
  scanLimit: number;
  limit: number;
  /** Characters of `last_error` a group shares (its first `errorChars`), 1 to 1000. */
  errorChars: number;
}

/** Dead rows of one topic (outbox) or source and consumption (inbox) whose last errors start alike. */
export interface ConsoleDeadGroup {
  /** Topic (outbox) or source (inbox). */
  label: string;
  /** Inbox: `push` or `pull`; outbox: null. */
  consumption: 'push' | 'pull' | null;
  /** The first `errorChars` characters of the rows' last error; null when they have none. */
  error: string | null;
  count: number;
  /** The group's newest row time (outbox: died; inbox: received). */
  latest: Date;
}

/** The largest groups of the newest dead rows; `scanned` rows were read, `scanCapped` when that was `scanLimit`. */
export interface ConsoleDeadGroups {
  groups: ConsoleDeadGroup[];
  scanned: number;
  scanCapped: boolean;
}

/** The operator console's reads: each one statement, bounded by its limits on any table size. */
export interface ConsoleReads {
  outboxStatsByState(params: { countCap: number }): Promise<ConsoleStateCounts>;
  /** `processing` rows, soonest lease expiry first. */
  outboxClaimsInFlight(params: { limit: number }): Promise<ConsoleClaim[]>;
  /** Heads of keys that are not moving; candidates read per cause are capped at `scanLimit`. */
  outboxBlockedKeys(params: { limit: number; scanLimit: number; poisonAttempts: number; waitingCap: number }): Promise<ConsoleBlockedHead[]>;
  outboxDeadSearch(params: ConsoleDeadQuery): Promise<ConsoleDeadPage>;
  /** The newest dead rows (by when they died) grouped by topic and error start, largest groups first. */
  outboxDeadGroups(params: ConsoleDeadGroupQuery): Promise<ConsoleDeadGroups>;
  /** One row by id; undefined when absent. */
  outboxRowGet(params: { id: string }): Promise<ConsoleRow | undefined>;
  inboxStatsByState(params: { countCap: number }): Promise<ConsoleStateCounts>;
  inboxClaimsInFlight(params: { limit: number }): Promise<ConsoleClaim[]>;
  /** Heads of aggregates (push: across sources; pull: per source) that are not moving. */
  inboxBlockedAggregates(params: { limit: number; scanLimit: number; poisonAttempts: number; waitingCap: number }): Promise<ConsoleBlockedHead[]>;
  inboxDeadSearch(params: ConsoleDeadQuery): Promise<ConsoleDeadPage>;
  /** The newest dead rows (by when they were received) grouped by source, consumption and error start, largest groups first. */
  inboxDeadGroups(params: ConsoleDeadGroupQuery): Promise<ConsoleDeadGroups>;
  inboxRowGet(params: { id: string }): Promise<ConsoleRow | undefined>;
}
