/**
 * Building blocks for outbox poller tests: rows inserted through the driver, a pass's options
 * wired to in-memory destinations, a counting-down deadline and captured metrics, and a reader
 * of the rows' state.
 */
import type { Context } from 'aws-lambda';
import type { Destination } from '../../lib/destinations/destination.ts';
import type { OutboxMessageInput } from '../../lib/db/driver.ts';
import type { OutboxPassDriver } from '../../lib/outbox/pass-context.ts';
import type { OutboxPassOptions } from '../../lib/outbox/outbox-pass.ts';
import { createRouter } from '../../lib/outbox/routes.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { after, before, beforeEach } from 'node:test';
import { createTestDatabase, type TestDatabase } from './database.ts';
import { RecordingLogger } from './recording-logger.ts';

/**
 * A suite's database with every topic routed to the SQS destination `main` and polls every 10 ms
 * (`claimTimeoutMs` as given, else the default); the outbox and the reclaim gate are emptied
 * before each test. `started` receives the database once it exists.
 */
export function withOutboxDatabase(started: (db: TestDatabase) => void, outbox: { claimTimeoutMs?: number } = {}): void {
  let db: TestDatabase | undefined;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 10, ...outbox },
    });
    started(db);
  });
  after(async () => db?.drop());
  beforeEach(async () => {
    await db!.query(`DELETE FROM "${db!.schema}".outbox`);
    await db!.query(`DELETE FROM "${db!.schema}".queuebox_maintenance`);
  });
}

/** `withOutboxDatabase` with short leases (1.2 s). */
export function withShortLeaseOutbox(started: (db: TestDatabase) => void): void {
  withOutboxDatabase(started, { claimTimeoutMs: 1200 });
}

/** Inserts rows one by one in one transaction (so `sequence` follows the array order); returns their ids. */
export async function insertOutboxRows(db: TestDatabase, rows: OutboxMessageInput[]): Promise<string[]> {
  const ids: string[] = [];
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    for (const row of rows) ids.push(await db.driver.outboxInsert(client, row, { maxAttempts: db.config.outbox.maxAttempts }));
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
  return ids;
}

/**
 * A pass driver of its own — a new object, so its claim memory (`claimMemoryOf`, kept per driver
 * as a container keeps its driver) starts fresh — delegating to `driver`, with `overrides` in
 * place of some of its methods.
 */
export function delegatingPassDriver(driver: OutboxPassDriver, overrides: Partial<OutboxPassDriver> = {}): OutboxPassDriver {
  return {
    outboxClaimMany: (p) => driver.outboxClaimMany(p),
    outboxRenewMany: (p) => driver.outboxRenewMany(p),
    outboxMarkSentMany: (p) => driver.outboxMarkSentMany(p),
    outboxRetryMany: (p) => driver.outboxRetryMany(p),
    outboxMarkDeadMany: (p) => driver.outboxMarkDeadMany(p),
    outboxReclaimExpired: (p) => driver.outboxReclaimExpired(p),
    outboxStats: (scope) => driver.outboxStats(scope),
    ...overrides,
  };
}

/**
 * Wraps a driver to record which pass holds which row, and which claim holds each key: a row
 * claimed while held, or a key claimed while another claim (token) holds rows of it, is a
 * violation. The rows of a key in one claim (`outbox.rowsPerKey`) share its token; the key is
 * held until the claim has let go of all of them.
 */
export function claimRecordingDriver(driver: OutboxPassDriver, owner: string, held: { ids: Map<string, string>; keys: Map<string, string>; violations: string[] }): OutboxPassDriver {
  const rowsOfKey = keyRows(held);
  const release = (ids: string[]) => {
    for (const id of ids) {
      held.ids.delete(id);
      for (const [key, rows] of rowsOfKey) {
        if (!rows.delete(id) || rows.size > 0) continue;
        rowsOfKey.delete(key);
        held.keys.delete(key);
      }
    }
  };
  return {
    ...driver,
    outboxClaimMany: async (p) => {
      const rows = await driver.outboxClaimMany(p);
      for (const row of rows) {
        const holder = held.ids.get(row.id);
        if (holder !== undefined) held.violations.push(`${row.id} claimed by ${owner} while held by ${holder}`);
        held.ids.set(row.id, owner);
        if (row.key === null) continue;
        const token = held.keys.get(row.key);
        if (token !== undefined && token !== row.claimToken) held.violations.push(`key ${row.key} claimed by ${owner} while another claim holds rows of it`);
        held.keys.set(row.key, row.claimToken);
        rowsOfKey.set(row.key, (rowsOfKey.get(row.key) ?? new Set()).add(row.id));
      }
      return rows;
    },
    // Released before the settle runs: once the settle commits, another pass may claim the key's next row.
    outboxMarkSentMany: (p) => (release(p.claims.map((c) => c.id)), driver.outboxMarkSentMany(p)),
    outboxRetryMany: (p) => (release(p.items.map((c) => c.id)), driver.outboxRetryMany(p)),
    outboxMarkDeadMany: (p) => (release(p.items.map((c) => c.id)), driver.outboxMarkDeadMany(p)),
    ...(driver.outboxReleaseMany === undefined
      ? {}
      : { outboxReleaseMany: (p: { claims: Array<{ id: string; token: string }> }) => (release(p.claims.map((c) => c.id)), driver.outboxReleaseMany!(p)) }),
  };
}

const keyRowsOf = new WeakMap<object, Map<string, Set<string>>>();

/** The rows each held key has in its claim, shared by every wrapper of one `held` record. */
function keyRows(held: object): Map<string, Set<string>> {
  let rows = keyRowsOf.get(held);
  if (rows === undefined) keyRowsOf.set(held, (rows = new Map()));
  return rows;
}

export interface PassFixtureOptions {
  destinations: Destination[];
  driver?: OutboxPassDriver;
  /** Invocation timeout (ms) of the counting-down context; default 30 000. */
  timeoutMs?: number;
  /** Deadline margin (ms); default 0. */
  marginMs?: number;
  mode?: 'deadline' | 'drain';
  signal?: AbortSignal;
  /** Overrides of `outbox.*` for this pass only (e.g. a short `claimTimeoutMs`). */
  outbox?: Partial<TestDatabase['config']['outbox']>;
  /** The pass's invocation context (default: a new one counting down from `timeoutMs`). */
  context?: Context;
}

/** Options for `runOutboxPass`, plus the metrics buffer and logger it writes to. */
export function passFixture(db: TestDatabase, options: PassFixtureOptions): OutboxPassOptions & { metrics: QueueBoxMetrics; logger: RecordingLogger; lines: string[] } {
  const lines: string[] = [];
  const metrics = new QueueBoxMetrics({ namespace: 'QueueBoxTest', serviceName: 'queuebox-test', write: (line) => lines.push(line) });
  const logger = new RecordingLogger();
  const destinations = new Map(options.destinations.map((d) => [d.name, d]));
  const context = options.context ?? createInvocationContext({ timeoutMs: options.timeoutMs ?? 30_000 });
  return {
    driver: options.driver ?? db.driver,
    config: { outbox: { ...db.config.outbox, ...options.outbox } },
    destinations,
    router: createRouter(db.config.outbox.routes),
    deadline: createDeadline(context, options.marginMs ?? 0),
    metrics,
    logger,
    lines,
    mode: options.mode ?? 'drain',
    ...(options.signal ? { signal: options.signal } : {}),
  };
}

/**
 * An outbox row as tests inspect it; `dueInMs` is `scheduled_at` minus the database clock now,
 * `retryDelayMs` is `scheduled_at` minus `updated_at` (the delay a retry wrote, free of test timing).
 */
export interface InspectedRow {
  id: string;
  topic: string;
  key: string | null;
  state: string;
  attempt: number;
  max_attempts: number;
  last_error: string | null;
  claim_token: string | null;
  dueInMs: number;
  retryDelayMs: number;
  sequence: string;
}

/** Reads rows (all, or the given ids) ordered by `sequence`. */
export async function inspectRows(db: TestDatabase, ids?: string[]): Promise<InspectedRow[]> {
  return db.query<InspectedRow>(
    `SELECT id, topic, key, state, attempt, max_attempts, last_error, claim_token, sequence::text AS sequence,
            (EXTRACT(EPOCH FROM scheduled_at - clock_timestamp()) * 1000)::float8 AS "dueInMs",
            (EXTRACT(EPOCH FROM scheduled_at - updated_at) * 1000)::float8 AS "retryDelayMs"
       FROM "${db.schema}".outbox o
      WHERE $1::uuid[] IS NULL OR id = ANY($1::uuid[])
      -- The column, not the text alias of the same name (which sorts '120' before '13').
      ORDER BY o.sequence`,
    [ids ?? null],
  );
}

/** Row counts per state. */
export async function stateCounts(db: TestDatabase): Promise<Record<string, number>> {
  const rows = await db.query<{ state: string; n: number }>(`SELECT state, count(*)::int AS n FROM "${db.schema}".outbox GROUP BY state`);
  return Object.fromEntries(rows.map((r) => [r.state, r.n]));
}

/** The EMF lines' metrics as `name{dims} → value` (summed over lines), for assertions. */
export function emfValues(lines: string[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of lines) {
    const doc = JSON.parse(line) as Record<string, unknown> & { _aws: { CloudWatchMetrics: Array<{ Dimensions: string[][]; Metrics: Array<{ Name: string }> }> } };
    const directive = doc._aws.CloudWatchMetrics[0]!;
    const dims = (directive.Dimensions[0] ?? []).filter((d) => d !== 'service').map((d) => `${d}=${String(doc[d])}`).join(',');
    for (const metric of directive.Metrics) {
      const value = doc[metric.Name];
      // Summed over lines: a pass flushes counts when they happen and again at its end.
      const key = `${metric.Name}{${dims}}`;
      out.set(key, (out.get(key) ?? 0) + (Array.isArray(value) ? value.reduce((a: number, b: number) => a + b, 0) : Number(value)));
    }
  }
  return out;
}
