/**
 * Splitting of a destination batch into calls that respect a service's request limits.
 */

/**
 * Splits `entries`, keeping their order, into groups of at most `maxEntries` whose `bytes` add up
 * to at most `maxBytes`. Each entry is assumed to fit alone (callers reject larger ones first).
 */
export function packBatches<T extends { bytes: number }>(entries: readonly T[], maxEntries: number, maxBytes: number): T[][] {
  const calls: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const entry of entries) {
    if (current.length === maxEntries || (current.length > 0 && bytes + entry.bytes > maxBytes)) {
      calls.push(current);
      current = [];
      bytes = 0;
    }
    current.push(entry);
    bytes += entry.bytes;
  }
  if (current.length > 0) calls.push(current);
  return calls;
}
