/**
 * Numbers and tables of the stand-alone benchmark scripts' reports (one JSON line per result, then
 * a Markdown table to paste into docs).
 */

/** The median of `values` (the lower of the two middle values for an even count); not empty. */
export const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor((values.length - 1) / 2)]!;

/** `value / base`, rounded to two decimals; null when the base moved nothing (no ratio, not NaN). */
export const ratio = (value: number, base: number): number | null => (base > 0 ? Math.round((value / base) * 100) / 100 : null);

/** A count with thousands separators (`20,000`). */
export const count = (n: number): string => n.toLocaleString('en-US');

/** A Markdown table after a blank line: `header` and `rule` rows (`| a | b |`, `|---|--:|`), then `rows`. */
export function markdownTable(header: string, rule: string, rows: readonly string[]): string {
  return `\n${header}\n${rule}\n${rows.join('\n')}\n`;
}
