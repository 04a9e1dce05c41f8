/**
 * Reads one scalar out of a message body with a JSONPath expression of the subset the
 * configuration accepts (lib/config/json-path-syntax.ts). No script ever runs: the subset has none.
 *
 * Every step selects JSON values only, as RFC 9535 defines them: a name (`.a`, `['a']`) selects a
 * member of an object, an index (`[0]`) an element of an array, `*` every member or element, and
 * `..` applies the step to a node and every node below it (the node first, then its members or
 * elements in order, each followed by the nodes below it). An object's members come in
 * `Object.values` order: names that are whole numbers first, in numeric order, then the others as
 * written (docs/inbox.md says so). Applied to anything else a step
 * selects nothing: `$.refs[0]` on the string `"order-1"` is not its first character, and
 * `$.refs.length` (on a string or an array) is not a length — a character or a length is no
 * value of the message, and taking one would give different messages the same key.
 */
import { jsonPathSteps, type JsonPathStep } from '../config/json-path-syntax.ts';
import { ConfigError } from '../errors.ts';
import { InboxRejectionError } from './inbox-rejection.ts';
import { JsonNumberText } from './json-number-text.ts';

/**
 * The first value `path` selects in `json`, as a string: strings as they are, numbers as the
 * sender wrote them (a `JsonNumberText`) or in their decimal form. `undefined` when the path
 * selects nothing, `null` or an empty string.
 * Throws `InboxRejectionError('invalid_field')` when it selects an object, array or boolean;
 * `field` names the config key in that message (and in the `ConfigError` of a path the
 * configuration check would have refused).
 */
export function jsonPathText(json: unknown, path: string, field: string): string | undefined {
  const value = firstMatch(json, path, field);
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value === 'string') return value;
  if (value instanceof JsonNumberText) return value.text;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  throw new InboxRejectionError('invalid_field', `${field} ${path} must select a string or a number, but selected ${Array.isArray(value) ? 'an array' : typeof value}`);
}

/** The first node `path` selects in `json`, `undefined` when it selects none. */
function firstMatch(json: unknown, path: string, field: string): unknown {
  const parsed = jsonPathSteps(path);
  if ('problem' in parsed) throw new ConfigError([{ key: field, message: parsed.problem }]);
  // A `..` step with no `..` before it is met by each node once (the nodes it starts from are all
  // at one depth, with nothing below one of them below another): it needs no set.
  const expanded = parsed.steps.map((_, at) => (parsed.steps.slice(0, at).some((step) => step.descendant) ? new Set<object>() : undefined));
  for (const value of matches(json, parsed.steps, 0, expanded)) return value;
  return undefined;
}

/**
 * The nodes `steps[at…]` select below `node`, in document order, lazily (only the first is taken).
 *
 * `expanded[at]` holds the arrays and objects a descendant step `at` already went through,
 * each with everything below it: a later `..` step of the same index that meets one again skips it
 * and what is below it. Only the first node is taken, so a node met again selected nothing the
 * first time, and would select nothing again. Without this, each `..` step after another went
 * through the body again below every node the earlier one selected: `$..a..a..b` on a 112 KB body
 * of chains 62 deep took 3.5 s, one more `..a` 53 s. With it, each node is gone through at most
 * once per step.
 */
function* matches(node: unknown, steps: readonly JsonPathStep[], at: number, expanded: readonly (Set<object> | undefined)[]): Generator<unknown> {
  const step = steps[at];
  if (step === undefined) {
    yield node;
    return;
  }
  for (const target of step.descendant ? selfAndDescendants(node, expanded[at]) : [node]) {
    for (const child of selected(target, step.selector)) yield* matches(child, steps, at + 1, expanded);
  }
}

/** An object of the body: not an array, not a number kept as sent. */
function isObject(node: unknown): node is Record<string, unknown> {
  return typeof node === 'object' && node !== null && !Array.isArray(node) && !(node instanceof JsonNumberText);
}

/** The members or elements `selector` selects in `node`; none in a string, number, boolean or null. */
function selected(node: unknown, selector: JsonPathStep['selector']): unknown[] {
  if (Array.isArray(node)) {
    if (selector.kind === 'wildcard') return node;
    return selector.kind === 'index' && selector.index < node.length ? [node[selector.index]] : [];
  }
  if (isObject(node)) {
    if (selector.kind === 'wildcard') return Object.values(node);
    return selector.kind === 'name' && Object.hasOwn(node, selector.name) ? [node[selector.name]] : [];
  }
  return [];
}

/**
 * `node`, then each array or object below it, in document order (each followed by those below it):
 * the nodes a step can select in. Iterative, so a deep body costs no more per node than a flat one.
 * An array or object in `expanded` is skipped with everything below it; each one yielded is added.
 */
function* selfAndDescendants(node: unknown, expanded: Set<object> | undefined): Generator<unknown> {
  if (!isContainer(node)) {
    yield node;
    return;
  }
  if (!firstVisit(node, expanded)) return;
  yield node;
  const stack: Array<Iterator<unknown>> = [childrenOf(node)];
  while (stack.length > 0) {
    const next = stack[stack.length - 1]!.next();
    if (next.done === true) {
      stack.pop();
    } else if (isContainer(next.value) && firstVisit(next.value, expanded)) {
      yield next.value;
      stack.push(childrenOf(next.value));
    }
  }
}

/** False when `expanded` holds `node` already; else adds it (when there is a set) and says true. */
function firstVisit(node: object, expanded: Set<object> | undefined): boolean {
  if (expanded === undefined) return true;
  if (expanded.has(node)) return false;
  expanded.add(node);
  return true;
}

function childrenOf(node: unknown[] | Record<string, unknown>): Iterator<unknown> {
  return (Array.isArray(node) ? node : Object.values(node))[Symbol.iterator]();
}

function isContainer(node: unknown): node is unknown[] | Record<string, unknown> {
  return Array.isArray(node) || isObject(node);
}
