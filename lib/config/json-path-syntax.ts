/**
 * The JSONPath subset QueueBox accepts in `…Path` keys, checked when the configuration loads, and
 * its steps as the receivers evaluate them (lib/inbox/json-path-value.ts): one grammar for both,
 * so a path the configuration accepts is read the way it was checked.
 *
 * Accepted: `$`, then any of `.name`, `.*`, `..name`, `..*`, `[0]`, `[*]`, `['name']`, `["name"]`
 * (and `..[…]`); a quoted name takes `\'`, `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t` and
 * `\uXXXX` escapes (any other escaped character stands for itself). Filters and script expressions
 * (`[?(…)]`, `[(…)]`) are refused: they run code on sender data. A malformed path is refused
 * rather than read leniently (`$.[` must not become `$..`, selecting the whole body), so a typo
 * does not refuse or dead-letter every message at run time.
 */

/** What one step selects in each node it is applied to. */
export type JsonPathSelector = { kind: 'name'; name: string } | { kind: 'index'; index: number } | { kind: 'wildcard' };

/** One step of a path: its selector, applied to the node (`.`, `[…]`) or to the node and every node below it (`..`). */
export interface JsonPathStep {
  descendant: boolean;
  selector: JsonPathSelector;
}

// Groups: 1 `.`/`..`, 2 a name, 3 `*` | 4 `..` before a bracket, 5 an index, 6 `*`, 7 a '…' name, 8 a "…" name.
const SEGMENT = /(\.\.?)(?:([A-Za-z_$][A-Za-z0-9_$-]*)|(\*))|(\.\.)?\[(?:(\d+)|(\*)|'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\]/y;

const ESCAPES: Readonly<Record<string, string>> = { b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

function unescapeName(text: string): string {
  return text.replace(/\\(u[0-9A-Fa-f]{4}|.)/g, (_, escape: string) => (escape.length === 5 ? String.fromCharCode(parseInt(escape.slice(1), 16)) : (ESCAPES[escape] ?? escape)));
}

/** The steps of `path`, or the reason it is not an accepted JSONPath. */
export function jsonPathSteps(path: string): { steps: JsonPathStep[] } | { problem: string } {
  if (!path.startsWith('$')) return { problem: 'must start with $ (for example $.id)' };
  if (path.length === 1) return { problem: 'must select a field below $ (for example $.id)' };
  const steps: JsonPathStep[] = [];
  let at = 1;
  while (at < path.length) {
    SEGMENT.lastIndex = at;
    const match = SEGMENT.exec(path);
    if (match === null) {
      return { problem: `is not a supported JSONPath at character ${at + 1}: use $.a.b, $..a, $.a[0] or $['a b'] (filters and scripts are not supported)` };
    }
    const [, dots, name, , bracketDots, index, , single, double] = match;
    const quoted = single ?? double;
    const selector: JsonPathSelector =
      name !== undefined ? { kind: 'name', name } : quoted !== undefined ? { kind: 'name', name: unescapeName(quoted) } : index !== undefined ? { kind: 'index', index: Number(index) } : { kind: 'wildcard' };
    steps.push({ descendant: (dots ?? bracketDots) === '..', selector });
    at += match[0].length;
  }
  return { steps };
}

/** The reason `path` is not an accepted JSONPath, or `undefined` when it is. */
export function jsonPathProblem(path: string): string | undefined {
  const parsed = jsonPathSteps(path);
  return 'problem' in parsed ? parsed.problem : undefined;
}
