/**
 * How the console names a row's attempts, the way the logs and `last_error` do: `attempt 3 of 5`,
 * where 5 is the row's `max_attempts` (the number of deliveries) and 3 the delivery the row is on
 * (in flight), waits for (pending) or ended with (sent, processed, dead). `attempt` in the table is
 * 0-based: the attempts that failed before, lost leases included. Inbox rows carry no maximum
 * (the relay's or the pull worker's setting applies), so theirs read `attempt 3`.
 */

/** The part of a row the attempt text reads. */
export interface AttemptFields {
  state: string;
  attempt: number;
  maxAttempts: number | null;
}

/** `3 of 5`, or `3` without a maximum: the attempt the row is on, waits for or ended with. */
export function attemptNumber(row: Pick<AttemptFields, 'attempt' | 'maxAttempts'>): string {
  const of = row.maxAttempts !== null ? ` of ${row.maxAttempts}` : '';
  return `${row.attempt + 1}${of}`;
}

/** `attempt 3 of 5 next (2 failed)`, `attempt 3 of 5 in flight`, `attempt 5 of 5` (dead, sent, processed). */
export function attemptText(row: AttemptFields): string {
  const attempt = `attempt ${attemptNumber(row)}`;
  if (row.state === 'processing') return `${attempt} in flight`;
  if (row.state === 'pending') return row.attempt === 0 ? `${attempt} next` : `${attempt} next (${row.attempt} failed)`;
  return attempt;
}
