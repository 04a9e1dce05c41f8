/**
 * Bench workloads and sizes: how many messages, how many keys, how big the backlog is.
 *
 * Every case drains `drain` messages out of a table seeded with `seed` rows (`seed = drain`
 * except for the backlog workload, where only the first `drain` of a larger table are taken).
 */

/** One workload: `keys` = 0 means no key on any row. */
export interface Workload {
  name: string;
  /** Rows inserted before the drain starts. */
  seed: number;
  /** Messages the case must move (the first `drain` by sequence for a backlog). */
  drain: number;
  /** Distinct keys, assigned round-robin (`k<i % keys>`); 0 = keyless. */
  keys: number;
  /** Hot keys: 90 % of the rows go round-robin to 10 keys (`h<i % 10>`), the rest to the `keys` others. */
  hot?: boolean;
}

/** Message counts; `--sizes messages[,backlog[,backlogDrain]]` overrides them. */
export interface Sizes {
  messages: number;
  backlog: number;
  backlogDrain: number;
}

/** The full sizes: 20,000 messages and a 1,000,000-row backlog drained by 50,000. */
export const FULL_SIZES: Sizes = { messages: 20_000, backlog: 1_000_000, backlogDrain: 50_000 };
/** A smoke run that finishes in well under a minute. */
export const QUICK_SIZES: Sizes = { messages: 2_000, backlog: 100_000, backlogDrain: 5_000 };

/**
 * The outbox workloads at the given sizes: small tables drained whole, and backlogs (keyless,
 * 100 keys, 1,000 keys, hot keys) of which only the first `backlogDrain` rows are drained.
 */
export function workloads(sizes: Sizes): Workload[] {
  const backlog = (name: string, keys: number, hot?: boolean): Workload => ({ name, seed: sizes.backlog, drain: sizes.backlogDrain, keys, ...(hot ? { hot } : {}) });
  return [
    { name: 'unkeyed', seed: sizes.messages, drain: sizes.messages, keys: 0 },
    { name: 'keys-100', seed: sizes.messages, drain: sizes.messages, keys: 100 },
    { name: 'keys-1000', seed: sizes.messages, drain: sizes.messages, keys: 1000 },
    { name: 'keys-10000', seed: sizes.messages, drain: sizes.messages, keys: Math.min(10_000, sizes.messages) },
    { name: 'hot-keys-small', seed: sizes.messages, drain: sizes.messages, keys: 1000, hot: true },
    backlog('backlog', 0),
    backlog('keys-100-backlog', 100),
    backlog('keys-1000-backlog', 1000),
    backlog('hot-keys', 1000, true),
  ];
}

/** Parses `--sizes 20000,1000000,50000` (missing parts keep `base`). */
export function parseSizes(text: string, base: Sizes): Sizes {
  const [messages, backlog, backlogDrain] = text.split(',').map((part) => (part.trim() === '' ? undefined : Number(part)));
  const pick = (value: number | undefined, fallback: number) => {
    if (value === undefined) return fallback;
    if (!Number.isInteger(value) || value <= 0) throw new Error(`--sizes: ${text} is not a list of positive integers`);
    return value;
  };
  return { messages: pick(messages, base.messages), backlog: pick(backlog, base.backlog), backlogDrain: pick(backlogDrain, base.backlogDrain) };
}

/** Key of the `i`-th message (1-based) of a workload; null when keyless. */
export function keyExpression(w: Pick<Workload, 'keys' | 'hot'>, seriesColumn: string): string {
  if (w.keys === 0) return 'NULL::varchar';
  const g = seriesColumn;
  return w.hot === true
    ? `CASE WHEN ${g} % 100 < 90 THEN 'h' || (${g} % 10) ELSE 'k' || ((${g} / 100) % ${w.keys}) END`
    : `'k' || (${g} % ${w.keys})`;
}
