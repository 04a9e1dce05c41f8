/**
 * The time left for database statements: a pass runs inside `withStatementBudget(remainingMs,
 * work)`, and every statement the drivers send for it — claims, renewals, settles, forwards, the
 * pull worker's business transactions — is bounded by the time its budget has left at the moment
 * it is sent (PostgreSQL: `statement_timeout` set for the statement's own transaction; SQL
 * Server: the request timeout). A statement cannot commit a claim for an invocation that has
 * ended, and a lease measured from the statement's start ends with the invocation.
 *
 * Two bounds travel together: the statement's (`remainingMs`) and the lease's (`leaseRemainingMs`,
 * by default the same). A scheduled pass runs its claims, reclaim, backlog reads and scale-out
 * statements up to its deadline (the invocation's end less `lambda.deadlineMarginMs`), while the
 * leases those claims grant still run to the invocation's end; only its finishing writes and
 * renewals are bounded by the invocation's end itself (the margin is theirs).
 *
 * The budget travels with the pass's asynchronous context (`AsyncLocalStorage`), so timers the
 * pass starts (lease renewals) carry it too; work outside a pass has no budget and keeps the
 * configured `database.statementTimeoutMs` / `database.requestTimeoutMs` alone.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { redactError } from '../claims/redact.ts';
import { QueueBoxError } from '../errors.ts';
import { jitteredPause, retryingDeadlockVictim } from './deadlock-victim.ts';

interface Budget {
  /** Milliseconds a statement sent now may run. */
  statementMs: () => number;
  /** Milliseconds a lease granted now may last at most. */
  leaseMs: () => number;
}

const budget = new AsyncLocalStorage<Budget>();

/**
 * Runs `work` with every statement it sends bounded by `remainingMs()`, and every lease it grants
 * or renews by `leaseRemainingMs()` (default `remainingMs`: the same bound). A pass's claims run
 * with its deadline as `remainingMs` and the invocation's time left as `leaseRemainingMs`.
 */
export function withStatementBudget<T>(remainingMs: () => number, work: () => Promise<T>, leaseRemainingMs: () => number = remainingMs): Promise<T> {
  return budget.run({ statementMs: remainingMs, leaseMs: leaseRemainingMs }, work);
}

/** Milliseconds a statement sent now may run, or `undefined` outside a bounded pass. */
export function statementBudgetMs(): number | undefined {
  const remaining = budget.getStore();
  return remaining === undefined ? undefined : Math.floor(remaining.statementMs());
}

/**
 * A lease to grant or renew with a statement sent now: `leaseMs`, but no longer than the time left
 * in the invocation (the budget's lease bound). The drivers apply it as late as they can, since the
 * caller sized `leaseMs` a moment earlier: PostgreSQL when the statement's parameters are bound,
 * after waiting for a connection; SQL Server when the request's inputs are bound, before `mssql`
 * takes a connection.
 */
export function leaseWithinBudget(leaseMs: number): number {
  const remaining = budget.getStore();
  return remaining === undefined ? leaseMs : Math.max(1, Math.min(leaseMs, Math.floor(remaining.leaseMs())));
}

/** A statement was not sent because the invocation it belongs to has no time left. */
export class InvocationEndedError extends QueueBoxError {
  override readonly name = 'InvocationEndedError';
  constructor() {
    super('statement not sent: the invocation has no time left');
  }
}

/** The budget for a statement sent now; throws `InvocationEndedError` when nothing is left. */
export function requireStatementBudgetMs(): number | undefined {
  const ms = statementBudgetMs();
  if (ms !== undefined && ms <= 0) throw new InvocationEndedError();
  return ms;
}

/**
 * Whether `error` ended a statement that a pass's deadline bounded (a claim): `InvocationEndedError`
 * (not sent), or, once the deadline has passed (`expired`), the database's cancellation by the
 * statement's timeout (PostgreSQL `57014`, `mssql` `ETIMEOUT`). Such a claim claimed nothing (its
 * transaction rolled back): the pass has reached its deadline, which is no failure.
 */
export function endedAtDeadline(error: unknown, expired: boolean): boolean {
  if (error instanceof InvocationEndedError) return true;
  if (!expired || typeof error !== 'object' || error === null) return false;
  const code = (error as { code?: unknown }).code;
  return code === '57014' || code === 'ETIMEOUT';
}

/**
 * Runs `statement`, a claim or reclaim bounded by a pass's deadline, and resolves `undefined` when
 * it ended at that deadline (`endedAtDeadline`, with the deadline read when it failed): it took
 * nothing, and the pass has reached its deadline, which ends it as any deadline does — with its
 * summary, not an error. `onCancelled` hears of a statement the database cancelled there (not of
 * one never sent), which waited the pass's whole time: behind a lock held across the deadline, or
 * slow. Any other error is thrown as it came.
 */
export async function unlessEndedAtDeadline<T>(statement: () => Promise<T>, deadline: { expired(): boolean }, onCancelled?: (error: unknown) => void): Promise<T | undefined> {
  try {
    return await statement();
  } catch (error) {
    if (!endedAtDeadline(error, deadline.expired())) throw error;
    if (!(error instanceof InvocationEndedError)) onCancelled?.(error);
    return undefined;
  }
}

/**
 * Runs `reclaim`, the reclaim step of a pass (outbox poller, inbox relay), as both passes run it:
 *
 * - bounded by the pass's deadline (`deadline.remainingMs`), not by the invocation's end: a slow
 *   reclaim must not keep the invocation past the time the pass has (it skips rows others hold
 *   locked, so it waits on none), and it grants no lease, so the margin is not its;
 * - sent again when the database ended it as a deadlock victim (`retryingDeadlockVictim`, with a
 *   jittered pause): it may run again, as its own rules say;
 * - `undefined` when it ended at that deadline (`unlessEndedAtDeadline`): not sent once the
 *   deadline has passed, or cancelled there by the database, it returned no row (its transaction
 *   rolled back), so it did not run, and the pass ends at its deadline with its summary, not an
 *   error. `onCancelled` hears of a cancellation (the caller logs it, its error redacted).
 *
 * Any other error is thrown as it came (it fails the pass).
 */
export function reclaimWithinDeadline<T>(
  reclaim: () => Promise<T>,
  deadline: { remainingMs(): number; expired(): boolean },
  onCancelled?: (error: unknown) => void,
): Promise<T | undefined> {
  return withStatementBudget(
    () => deadline.remainingMs(),
    () => unlessEndedAtDeadline(() => retryingDeadlockVictim(reclaim, { pauseMs: jitteredPause }), deadline, onCancelled),
  );
}

/**
 * A pass's answer to a reclaim cut short after some of its chunks committed (`cut.cutBy`; nothing
 * to do without it): at the pass's deadline (`endedAtDeadline`), as a reclaim cancelled there, a
 * warning with the counts of the chunks that committed (the caller counted them), and the pass
 * ends at its deadline; any other failure of a later chunk is thrown, failing the pass as a failed
 * reclaim does (its counts written before).
 */
export function answerReclaimCut(
  table: 'outbox' | 'inbox',
  cut: { reclaimed: number; dead: number; cutBy?: unknown },
  deadline: { expired(): boolean },
  logger: { warn(message: string, fields: Record<string, unknown>): void },
): void {
  if (cut.cutBy === undefined) return;
  if (!endedAtDeadline(cut.cutBy, deadline.expired())) throw cut.cutBy;
  logger.warn(`${table} reclaim cut short at the pass deadline: the chunks it committed are counted; the expired rows left wait for a later reclaim`, {
    reclaimed: cut.reclaimed,
    dead: cut.dead,
    error: redactError(cut.cutBy),
  });
}
