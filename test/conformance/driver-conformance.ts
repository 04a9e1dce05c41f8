/**
 * The driver conformance suite: one behaviour contract, run against every dialect available.
 *
 * `runDriverConformance(name, setup)` registers one test (or more) per `Driver` method. A dialect
 * provides a `ConformanceTarget`: the driver under test plus small inspection helpers (read a row,
 * move a time column on the database clock, open a caller transaction) written in its own SQL in
 * `test/conformance/*-target.ts`. With `{ skip: reason }` every case is registered as skipped with
 * that reason, so the runner reports what did not run and why.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import type { CallerTransaction, Driver, InboxMessageInput, OutboxMessageInput } from '../../lib/db/driver.ts';
import { defineConcurrencyCases } from './concurrency-cases.ts';
import { defineConsoleCases } from './console-cases.ts';
import { defineGeneralCases } from './general-cases.ts';
import { defineInboxCases } from './inbox-cases.ts';
import { defineInboxReplayCases } from './inbox-replay-cases.ts';
import { defineOutboxCases } from './outbox-cases.ts';
import { definePayloadTextCases } from './payload-text-cases.ts';
import { definePullCases } from './pull-cases.ts';
import { defineScaleOutCases } from './scale-out-cases.ts';

/** Time columns a test may move relative to the database clock. */
export type TimeColumn = 'lease_expires_at' | 'scheduled_at' | 'created_at' | 'updated_at';

/** A row as read back for assertions: ids lower-case, JSON parsed, times as `Date`. */
export interface InspectedRow {
  id: string;
  state: string;
  attempt: number;
  claim_token: string | null;
  lease_expires_at: Date | null;
  claimed_at: Date | null;
  scheduled_at: Date;
  last_error: string | null;
  [column: string]: unknown;
}

/** What a dialect provides to the suite; `reset` runs before every case. */
export interface ConformanceTarget {
  driver: Driver;
  /** Another driver ("replica") on its own pool, optionally on other table names. */
  newDriver(tables?: { outbox?: string; inbox?: string; maintenance?: string }): Driver;
  row(table: 'outbox' | 'inbox', id: string): Promise<InspectedRow | undefined>;
  count(table: 'outbox' | 'inbox', state?: string): Promise<number>;
  /** Sets `column` of row `id` to the database clock plus `msFromNow` (negative: in the past). */
  setTime(table: 'outbox' | 'inbox', id: string, column: TimeColumn, msFromNow: number): Promise<void>;
  /** Runs `work` in a caller transaction of this dialect, then commits or rolls back. */
  inTransaction<T>(work: (tx: CallerTransaction) => Promise<T>, end: 'commit' | 'rollback'): Promise<T>;
  /**
   * Sets READ_COMMITTED_SNAPSHOT of the database and returns its previous value; only where the
   * dialect has the setting (SQL Server). Cases that must hold under both settings run under each.
   */
  readCommittedSnapshot?(on: boolean): Promise<boolean>;
  /** Lock escalations so far on `table` (SQL Server); absent where locks do not escalate. */
  lockEscalations?(table: 'outbox' | 'inbox'): Promise<number>;
  /** Takes an exclusive lock on `table` (every read of it waits) until the returned function is called. */
  lockTable(table: 'outbox' | 'inbox'): Promise<() => Promise<void>>;
  /** Empties the outbox, inbox and maintenance tables. */
  reset(): Promise<void>;
  close(): Promise<void>;
}

/** Registers a case; the cases files call it once per behaviour. */
export type DefineCase = (title: string, run: (t: ConformanceTarget) => Promise<void>) => void;

/** Inserts outbox rows one by one in a committed caller transaction; returns their ids in order. */
export async function enqueueRows(t: ConformanceTarget, messages: OutboxMessageInput[]): Promise<string[]> {
  return t.inTransaction(async (tx) => {
    const ids: string[] = [];
    for (const m of messages) ids.push(await t.driver.outboxInsert(tx, m, { maxAttempts: 5 }));
    return ids;
  }, 'commit');
}

/** Inserts inbox rows one by one (receive order); returns their ids in order. */
export async function receiveRows(t: ConformanceTarget, messages: Array<Partial<InboxMessageInput> & { idempotencyKey: string }>): Promise<string[]> {
  const ids: string[] = [];
  for (const m of messages) {
    const result = await t.driver.inboxInsert({ source: 'src', payload: { k: m.idempotencyKey }, consumption: 'push', ...m });
    ids.push(result.id);
  }
  return ids;
}

/** Registers the whole suite for one dialect. */
export function runDriverConformance(name: string, setup: () => Promise<ConformanceTarget>, options: { skip?: string } = {}): void {
  describe(`driver conformance: ${name}`, () => {
    let target: ConformanceTarget | undefined;
    const define: DefineCase = (title, run) => {
      if (options.skip !== undefined) {
        it(title, { skip: options.skip }, () => {});
        return;
      }
      it(title, async () => run(target!));
    };
    if (options.skip === undefined) {
      before(async () => {
        target = await setup();
      });
      beforeEach(async () => target!.reset());
      after(async () => target?.close());
    }
    describe('general', () => defineGeneralCases(define));
    describe('outbox', () => defineOutboxCases(define));
    describe('inbox', () => defineInboxCases(define));
    describe('inbox requeue', () => defineInboxReplayCases(define));
    describe('pull', () => definePullCases(define));
    describe('concurrency', () => defineConcurrencyCases(define));
    describe('console', () => defineConsoleCases(define));
    describe('payload text', () => definePayloadTextCases(define));
    describe('scale-out', () => defineScaleOutCases(define));
  });
}
