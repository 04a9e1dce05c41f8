/**
 * The schedule expressions EventBridge accepts, checked when the service is read, so a typo is an
 * error naming the key instead of a failed deploy halfway through (EventBridge, "Schedule
 * expressions for rules"):
 *
 * - `rate(value unit)`: a positive whole value; the unit `minute`, `hour` or `day` when the value
 *   is 1, else `minutes`, `hours`, `days` (`rate(1 minutes)` and `rate(5 minute)` are refused).
 * - `cron(minutes hours day-of-month month day-of-week year)`: six fields; one of day-of-month and
 *   day-of-week is `?` (not both); each field takes only its own values and wildcards.
 */

const RATE = /^rate\((\d+) (minute|hour|day)(s?)\)$/;

const MONTHS = ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'];
const DAYS = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];

interface CronField {
  name: string;
  min: number;
  max: number;
  names?: readonly string[];
  /** Wildcards beyond `, - * /`. */
  question?: boolean;
  last?: boolean;
  weekday?: boolean;
  hash?: boolean;
}

const FIELDS: readonly CronField[] = [
  { name: 'minutes', min: 0, max: 59 },
  { name: 'hours', min: 0, max: 23 },
  { name: 'day-of-month', min: 1, max: 31, question: true, last: true, weekday: true },
  { name: 'month', min: 1, max: 12, names: MONTHS },
  { name: 'day-of-week', min: 1, max: 7, names: DAYS, question: true, last: true, hash: true },
  { name: 'year', min: 1970, max: 2199 },
];

/** Why EventBridge would refuse the expression, or `undefined` when it is valid. */
export function scheduleExpressionProblem(expression: string): string | undefined {
  if (expression.startsWith('rate(')) {
    const rate = RATE.exec(expression);
    if (!rate) return 'must be rate(<value> <unit>) with a unit of minute(s), hour(s) or day(s), such as rate(5 minutes)';
    const value = Number(rate[1]);
    if (value < 1 || !Number.isSafeInteger(value)) return `rate value ${rate[1]} must be a whole number of at least 1`;
    const plural = rate[3] === 's';
    if (value === 1 && plural) return `rate(1 ${rate[2]}s) must be rate(1 ${rate[2]}): a value of 1 takes the singular unit`;
    if (value > 1 && !plural) return `rate(${value} ${rate[2]}) must be rate(${value} ${rate[2]}s): a value above 1 takes the plural unit`;
    return undefined;
  }
  const cron = /^cron\((.*)\)$/.exec(expression);
  if (!cron) return 'must be rate(…) or cron(…)';
  const fields = cron[1]!.trim().split(/\s+/).filter((f) => f !== '');
  if (fields.length !== FIELDS.length) return `cron(…) takes six fields (minutes hours day-of-month month day-of-week year), not ${fields.length}`;
  for (const [i, field] of FIELDS.entries()) {
    const problem = cronFieldProblem(fields[i]!, field);
    if (problem !== undefined) return `cron(…) ${field.name} field ${fields[i]}: ${problem}`;
  }
  const [dayOfMonth, dayOfWeek] = [fields[2]!, fields[4]!];
  if ((dayOfMonth === '?') === (dayOfWeek === '?')) return 'cron(…) takes ? in exactly one of day-of-month and day-of-week';
  return undefined;
}

function cronFieldProblem(text: string, field: CronField): string | undefined {
  if (text === '?') return field.question ? undefined : 'takes no ?';
  if (field.last && text === 'L') return undefined;
  if (field.weekday && text === 'LW') return undefined;
  for (const item of text.split(',')) {
    const problem = cronItemProblem(item, field);
    if (problem !== undefined) return problem;
  }
  return undefined;
}

function cronItemProblem(item: string, field: CronField): string | undefined {
  const value = (token: string): number | undefined => {
    if (/^\d+$/.test(token)) return Number(token);
    const index = field.names?.indexOf(token.toUpperCase()) ?? -1;
    return index < 0 ? undefined : index + 1;
  };
  const inRange = (token: string): string | undefined => {
    const v = value(token);
    if (v === undefined) return `${token} is not a value of this field`;
    return v < field.min || v > field.max ? `${token} is outside ${field.min}-${field.max}` : undefined;
  };
  if (field.hash && item.includes('#')) {
    const [day, nth] = item.split('#');
    if (nth === undefined || !/^[1-5]$/.test(nth)) return `${item}: the week after # is 1-5`;
    return inRange(day ?? '');
  }
  if (field.last && /^.+L$/.test(item) && field.hash) return inRange(item.slice(0, -1));
  if (field.weekday && /^\d+W$/.test(item)) return inRange(item.slice(0, -1));
  if (field.last && /^L-\d+$/.test(item) && field.weekday) return Number(item.slice(2)) > 30 ? `${item}: at most L-30` : undefined;
  const [range, step, extra] = item.split('/');
  if (extra !== undefined) return `${item} has more than one /`;
  if (step !== undefined && (!/^\d+$/.test(step) || Number(step) < 1)) return `${item}: the step after / is a whole number of at least 1`;
  if (range === '*') return undefined;
  const ends = (range ?? '').split('-');
  if (ends.length > 2 || ends.some((e) => e === '')) return `${item} is not a value, range or step`;
  for (const end of ends) {
    const problem = inRange(end);
    if (problem !== undefined) return problem;
  }
  return undefined;
}
