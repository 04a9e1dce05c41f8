/**
 * The JSONPath subset QueueBox accepts in `…Path` keys, checked when the configuration loads.
 *
 * `jsonpath-plus` reads a malformed path leniently (`$.[` becomes `$..`, selecting the whole
 * body), so a typo would refuse or dead-letter every message at run time. Accepted: `$`, then
 * any of `.name`, `.*`, `..name`, `..*`, `[0]`, `[*]`, `['name']`, `["name"]` (and `..[…]`).
 * Filters and script expressions (`[?(…)]`, `[(…)]`) are refused: they run code on sender data.
 */

const SEGMENT = /\.\.?(?:[A-Za-z_$][A-Za-z0-9_$-]*|\*)|(?:\.\.)?\[(?:\d+|\*|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\]/y;

/** The reason `path` is not an accepted JSONPath, or `undefined` when it is. */
export function jsonPathProblem(path: string): string | undefined {
  if (!path.startsWith('$')) return 'must start with $ (for example $.id)';
  let at = 1;
  if (path.length === 1) return 'must select a field below $ (for example $.id)';
  while (at < path.length) {
    SEGMENT.lastIndex = at;
    const match = SEGMENT.exec(path);
    if (match === null) {
      return `is not a supported JSONPath at character ${at + 1}: use $.a.b, $..a, $.a[0] or $['a b'] (filters and scripts are not supported)`;
    }
    at += match[0].length;
  }
  return undefined;
}
