/**
 * A one-off function's statement cut at the invocation's deadline. The replay and reclaim
 * functions bound their statements by the time to the deadline (`operationBudgetMs`), so a
 * statement still running then is cancelled by the database as a statement timeout (PostgreSQL
 * 57014, SQL Server's request timeout), and one due after it is not sent. Reported as they come,
 * those errors send the operator to `database.statementTimeoutMs`, which did not end it: this
 * names the deadline, what the run left done, and what to do.
 */
import { InvocationEndedError } from '../db/statement-budget.ts';
import { QueueBoxError, TransientDatabaseError } from '../errors.ts';
import type { ReclaimIncompleteError } from './reclaim-now.ts';

/**
 * Budget left (ms) under which a statement timeout is the deadline's. A statement is given the
 * whole budget left when it is sent, so the budget has run out when its timeout fires; this is
 * room for the rounding of the budget to whole milliseconds, not for a timeout of another origin.
 */
export const DEADLINE_CUT_SLACK_MS = 250;

/** A one-off function's run was cut at the invocation's deadline; `message` says what it left done. */
export class InvocationDeadlineError extends QueueBoxError {
  override readonly name = 'InvocationDeadlineError';
}

/**
 * True when `error` (or an error under it) is a statement the invocation's deadline ended: one
 * not sent for want of time, or a statement timeout with `budgetLeftMs` (the statement budget's
 * time left now) run out. A statement timeout with time left came from elsewhere
 * (`database.statementTimeoutMs`), and an administrator's cancel (57014 too) is not a timeout:
 * both are left as they are.
 */
export function cutAtDeadline(error: unknown, budgetLeftMs: number): boolean {
  for (let current: unknown = error, depth = 0; current instanceof Error && depth < 5; current = current.cause, depth++) {
    if (current instanceof InvocationEndedError) return true;
    if (!(current instanceof TransientDatabaseError)) continue;
    const timeout = (current.code === '57014' && /statement timeout/i.test(current.message)) || current.code === 'ETIMEOUT';
    if (timeout) return budgetLeftMs <= DEADLINE_CUT_SLACK_MS;
  }
  return false;
}

/** "at the invocation's deadline, N ms after the run started (…)": when the cut came, for a message. */
export function deadlineWording(hadMs: number, marginMs: number): string {
  return `at the invocation's deadline, ${Math.round(hadMs)} ms after the run started (the function's timeout less lambda.deadlineMarginMs, ${marginMs} ms; at least half the invocation), not by database.statementTimeoutMs`;
}

/** What a run was and where it ran, for the explanation of its cut. */
export interface DeadlineCutContext {
  dialect: 'postgres' | 'sqlserver';
  /** The time the run's statements had (ms): the statement budget when the run started. */
  hadMs: number;
  /** `lambda.deadlineMarginMs`. */
  marginMs: number;
}

/**
 * The replay function's run cut at the deadline (`cutAtDeadline`): what moved and what to do. A
 * dry run moves nothing; a move is one statement (PostgreSQL) or one transaction (SQL Server, a
 * move of at most the confirmation's 100 rows), rolled back; a confirmed (`"yes": true`) move on
 * SQL Server commits chunks one by one, and those committed before the cut stay moved.
 */
export function replayCutAtDeadline(error: unknown, at: DeadlineCutContext & { dryRun: boolean; yes: boolean }): InvocationDeadlineError {
  const moved = at.dryRun
    ? 'nothing moved (a dry run moves nothing)'
    : at.dialect === 'sqlserver' && at.yes
      ? 'the rows of the chunks it committed before the cut are pending again and the rest is unchanged (a confirmed replay commits chunk by chunk): the same replay moves the rest, as a moved row no longer matches'
      : 'nothing moved (the move is one transaction, rolled back)';
  return new InvocationDeadlineError(
    `replay: the database cancelled the replay ${deadlineWording(at.hadMs, at.marginMs)}; ${moved}. ` +
      'Narrow the filter (createdFrom/createdTo, lastErrorPrefix, fewer topics, sources or ids) and replay in parts, ' +
      'or raise the function\'s timeout (custom.queuebox.functions.replay.timeout, at most 900 s)',
    { cause: error },
  );
}

/**
 * The reclaim function's run cut at the deadline (`cutAtDeadline`): which table's reclaim was
 * cancelled and what it left. A table's reclaim commits chunks one by one in both dialects, and
 * those committed before the cut stay reclaimed: on PostgreSQL they are counted (`error.counts`,
 * the chunk cut rolled back alone), on SQL Server not. The other table's reclaim, when it
 * finished, counts as it did.
 */
export function reclaimCutAtDeadline(error: ReclaimIncompleteError, at: DeadlineCutContext): InvocationDeadlineError {
  const failed = error.failed.length > 0 ? error.failed : (['outbox', 'inbox'] as const);
  const tables = failed.length === 2 ? 'the outbox and the inbox' : `the ${failed[0]!}`;
  const returned = (table: 'outbox' | 'inbox') => {
    const back = error.counts[table];
    const dead = error.counts[table === 'outbox' ? 'outboxDead' : 'inboxDead'];
    const what = back + dead === 0 ? 'returned no row' : `returned ${back} rows to pending and made ${dead} dead in the chunks it committed before the cut, counted`;
    return failed.length === 2 ? `the ${table}'s reclaim ${what}` : `it ${what}`;
  };
  const left =
    at.dialect === 'sqlserver'
      ? `the rows of the chunks it committed before the cut are reclaimed but not counted (a table's reclaim commits chunk by chunk), the rest are still processing`
      : `${failed.map(returned).join(', and ')} (a table's reclaim commits chunk by chunk; the chunk the cut cancelled rolled back alone): the expired rows left are still processing, for the next reclaim`;
  const other = (['outbox', 'inbox'] as const).find((t) => !failed.includes(t));
  const done = other === undefined ? '' : `; the ${other}'s reclaim finished: ${error.counts[other]} back to pending and ${error.counts[other === 'outbox' ? 'outboxDead' : 'inboxDead']} dead`;
  return new InvocationDeadlineError(
    `reclaim: the database cancelled the reclaim of ${tables} ${deadlineWording(at.hadMs, at.marginMs)}; ${left}${done}. ` +
      'Raise the function\'s timeout (custom.queuebox.functions.reclaim.timeout), or run `queuebox reclaim` from the command line, ' +
      'whose statements database.statementTimeoutMs bounds',
    { cause: error },
  );
}
