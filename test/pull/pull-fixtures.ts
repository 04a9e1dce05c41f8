/**
 * Test fixtures for pull workers: inserts `consumption = 'pull'` inbox rows with plain SQL (the
 * receivers are another area) and reads rows back.
 */
import type { TestDatabase } from '../helpers/database.ts';

export interface PullRowSpec {
  key: string;
  aggregateId?: string | null;
  payload?: unknown;
  /** Due after this many ms (database clock). */
  delayMs?: number;
}

/**
 * Inserts rows in the given order (receive order: increasing `sequence` and `created_at`);
 * returns their ids in the same order.
 */
export async function insertPullRows(db: TestDatabase, source: string, specs: PullRowSpec[]): Promise<string[]> {
  const rows = await db.query<{ id: string }>(
    `INSERT INTO "${db.schema}".inbox (source, idempotency_key, aggregate_id, payload, consumption, created_at, scheduled_at)
     SELECT $1, s.key, s.aggregate_id, s.payload, 'pull',
            -- one microsecond apart, so receive order is also claim order when nothing is delayed
            statement_timestamp() + s.ord * interval '1 microsecond',
            statement_timestamp() + s.ord * interval '1 microsecond' + s.delay_ms * interval '1 millisecond'
       FROM unnest($2::text[], $3::text[], $4::jsonb[], $5::double precision[]) WITH ORDINALITY AS s(key, aggregate_id, payload, delay_ms, ord)
      ORDER BY s.ord
     RETURNING id, sequence`,
    [
      source,
      specs.map((s) => s.key),
      specs.map((s) => s.aggregateId ?? null),
      specs.map((s) => JSON.stringify(s.payload ?? { key: s.key })),
      specs.map((s) => s.delayMs ?? 0),
    ],
  );
  return (rows as Array<{ id: string; sequence: string }>).sort((a, b) => Number(a.sequence) - Number(b.sequence)).map((r) => r.id);
}

export interface StoredPullRow {
  id: string;
  idempotency_key: string;
  aggregate_id: string | null;
  state: string;
  attempt: number;
  claim_token: string | null;
  lease_expires_at: Date | null;
  last_error: string | null;
  processed_at: Date | null;
  /** scheduled_at − clock_timestamp() in ms at the time of the read. */
  due_in_ms: number;
}

/** Reads pull rows of `source` in receive order. */
export async function readPullRows(db: TestDatabase, source: string): Promise<StoredPullRow[]> {
  return db.query<StoredPullRow>(
    `SELECT id, idempotency_key, aggregate_id, state, attempt, claim_token, lease_expires_at, last_error, processed_at,
            EXTRACT(EPOCH FROM scheduled_at - clock_timestamp())::float8 * 1000 AS due_in_ms
       FROM "${db.schema}".inbox WHERE source = $1 ORDER BY sequence`,
    [source],
  );
}

/** Makes a row's lease look expired (as if its owner froze past it). */
export async function expireLease(db: TestDatabase, id: string): Promise<void> {
  await db.query(`UPDATE "${db.schema}".inbox SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, [id]);
}

/** Makes every pending row of `source` due now (skips a retry's wait). */
export async function makeDue(db: TestDatabase, source: string): Promise<void> {
  await db.query(`UPDATE "${db.schema}".inbox SET scheduled_at = clock_timestamp() WHERE source = $1 AND state = 'pending'`, [source]);
}

/** A logger that keeps what it is told, for assertions and quiet test output. */
export function memoryLogger(): { lines: Array<{ level: string; message: string }>; warn(m: string): void; error(m: string): void } {
  const lines: Array<{ level: string; message: string }> = [];
  return {
    lines,
    warn: (message) => void lines.push({ level: 'warn', message }),
    error: (message) => void lines.push({ level: 'error', message }),
  };
}
