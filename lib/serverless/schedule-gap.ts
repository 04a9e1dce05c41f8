/**
 * The longest time between two runs of an EventBridge schedule expression (seconds), which sizes
 * a scheduled function's heartbeat alarm (`monitoring.ts`).
 *
 * - `rate(N minute|minutes|hour|hours|day|days)`: N units.
 * - `cron(minutes hours day-of-month month day-of-week year)` that fires every day (day-of-month
 *   and day-of-week `*` or `?`, month and year `*`): the longest gap between the day's firing
 *   minutes, across midnight included. Minutes and hours take numbers, `*`, ranges `a-b`, steps
 *   `/n` and lists.
 *
 * Anything else (a cron on some days, weeks or months only; `L`, `W`, `#`) gives `undefined`:
 * its gaps are not one number a CloudWatch alarm window could follow.
 */

const UNIT_SECONDS: Record<string, number> = { minute: 60, minutes: 60, hour: 3600, hours: 3600, day: 86_400, days: 86_400 };

/** Longest gap between two runs of `expression` in seconds, or `undefined` when it has none that can be told. */
export function scheduleMaxGapSeconds(expression: string): number | undefined {
  const rate = /^rate\((\d+) (minutes?|hours?|days?)\)$/.exec(expression.trim());
  if (rate) return Number(rate[1]) * UNIT_SECONDS[rate[2]!]!;
  const cron = /^cron\((.+)\)$/.exec(expression.trim());
  if (!cron) return undefined;
  const fields = cron[1]!.trim().split(/\s+/);
  if (fields.length !== 6) return undefined;
  const [minutes, hours, dayOfMonth, month, dayOfWeek, year] = fields as [string, string, string, string, string, string];
  const everyDay = ['*', '?'].includes(dayOfMonth) && ['*', '?'].includes(dayOfWeek) && month === '*' && year === '*';
  if (!everyDay) return undefined;
  const mins = cronValues(minutes, 59);
  const hrs = cronValues(hours, 23);
  if (mins === undefined || hrs === undefined || mins.length === 0 || hrs.length === 0) return undefined;
  const firings = hrs.flatMap((h) => mins.map((m) => h * 60 + m)).sort((a, b) => a - b);
  let gap = firings[0]! + 1440 - firings.at(-1)!;
  for (let i = 1; i < firings.length; i++) gap = Math.max(gap, firings[i]! - firings[i - 1]!);
  return gap * 60;
}

/** The values (0..max) a minutes or hours field selects, or `undefined` for syntax it does not take. */
function cronValues(field: string, max: number): number[] | undefined {
  const values = new Set<number>();
  for (const item of field.split(',')) {
    const match = /^(\*|(\d+)(?:-(\d+))?)(?:\/(\d+))?$/.exec(item);
    if (!match) return undefined;
    const start = match[1] === '*' ? 0 : Number(match[2]);
    // `a/n` runs from a to the end of the range, as in EventBridge's `0/5`.
    const end = match[1] === '*' || (match[3] === undefined && match[4] !== undefined) ? max : Number(match[3] ?? match[2]);
    const step = match[4] === undefined ? 1 : Number(match[4]);
    if (start > max || end > max || start > end || step < 1) return undefined;
    for (let v = start; v <= end; v += step) values.add(v);
  }
  return [...values];
}
