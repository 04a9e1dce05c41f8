/**
 * The time left for database statements: a pass runs inside `withStatementBudget(remainingMs,
 * work)`, and every statement the drivers send for it — claims, renewals, settles, forwards, the
 * pull worker's business transactions — is bounded by the time left in the invocation at the
 * moment it is sent (PostgreSQL: `statement_timeout` set for the statement's own transaction;
 * SQL Server: the request timeout). A statement cannot commit a claim for an invocation that has
 * ended, and a lease measured from the statement's start ends with the invocation.
 *
 * The budget travels with the pass's asynchronous context (`AsyncLocalStorage`), so timers the
 * pass starts (lease renewals) carry it too; work outside a pass has no budget and keeps the
 * configured `database.statementTimeoutMs` / `database.requestTimeoutMs` alone.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { QueueBoxError } from '../errors.ts';

const budget = new AsyncLocalStorage<() => number>();

/** Runs `work` with every statement it sends bounded by `remainingMs()` (the invocation's time left). */
export function withStatementBudget<T>(remainingMs: () => number, work: () => Promise<T>): Promise<T> {
  return budget.run(remainingMs, work);
}

/** Milliseconds a statement sent now may run, or `undefined` outside a bounded pass. */
export function statementBudgetMs(): number | undefined {
  const remaining = budget.getStore();
  return remaining === undefined ? undefined : Math.floor(remaining());
}

/**
 * A lease to grant or renew with a statement sent now: `leaseMs`, but no longer than the time left
 * in the invocation. The drivers apply it as late as they can, since the caller sized `leaseMs` a
 * moment earlier: PostgreSQL when the statement's parameters are bound, after waiting for a
 * connection; SQL Server when the request's inputs are bound, before `mssql` takes a connection.
 */
export function leaseWithinBudget(leaseMs: number): number {
  const ms = statementBudgetMs();
  return ms === undefined ? leaseMs : Math.max(1, Math.min(leaseMs, ms));
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
