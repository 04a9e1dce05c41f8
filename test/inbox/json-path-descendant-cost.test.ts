/**
 * A path of several `..` steps goes through each node of the body at most once per step.
 * Before, each `..` step after another went through the body again below every node the earlier
 * one selected: `$..a..a..b` on a 112 KB body of chains 62 deep (within the body rule's depth and
 * key limits) took 3.5 s, `$..a..a..a..b` 53 s — a hostile sender's body held a receiver for as
 * long as a configured path of chained descendant steps let it. Counted here in reads of the
 * body's objects (a `Proxy`), not in time; and the first match is checked against the plain
 * reading of RFC 9535 (the whole node list, then its first node) on bodies and paths drawn at random.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { jsonPathSteps, type JsonPathStep } from '../../lib/config/json-path-syntax.ts';
import { jsonPathText } from '../../lib/inbox/json-path-value.ts';

/** A chain `{"a":{"a":…{"a":1}}}` `depth` objects deep whose objects count how often their members are listed. */
function countedChain(depth: number, reads: { count: number }): unknown {
  let node: unknown = 1;
  for (let i = 0; i < depth; i++) {
    node = new Proxy(
      { a: node },
      {
        ownKeys(target) {
          reads.count++;
          return Reflect.ownKeys(target);
        },
      },
    );
  }
  return node;
}

/** RFC 9535's node list of `steps` in `node`, whole, in document order (duplicates kept). */
function nodeList(node: unknown, steps: readonly JsonPathStep[]): unknown[] {
  let nodes: unknown[] = [node];
  for (const step of steps) {
    const next: unknown[] = [];
    for (const start of nodes) {
      for (const target of step.descendant ? descendants(start) : [start]) {
        if (Array.isArray(target)) {
          if (step.selector.kind === 'wildcard') next.push(...(target as unknown[]));
          else if (step.selector.kind === 'index' && step.selector.index < target.length) next.push(target[step.selector.index]);
        } else if (typeof target === 'object' && target !== null) {
          const object = target as Record<string, unknown>;
          if (step.selector.kind === 'wildcard') next.push(...Object.values(object));
          else if (step.selector.kind === 'name' && Object.hasOwn(object, step.selector.name)) next.push(object[step.selector.name]);
        }
      }
    }
    nodes = next;
  }
  return nodes;
}

/** `node` and every array or object below it, each followed by those below it. */
function descendants(node: unknown): unknown[] {
  if (typeof node !== 'object' || node === null) return [node];
  const children = Array.isArray(node) ? (node as unknown[]) : Object.values(node);
  return [node, ...children.flatMap((child) => (typeof child === 'object' && child !== null ? descendants(child) : []))];
}

/** A small deterministic generator (mulberry32), so a failing draw can be run again. */
function randomOf(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const NAMES = ['a', 'b', 'id'];

function randomBody(random: () => number, depth: number): unknown {
  const roll = random();
  if (depth === 0 || roll < 0.25) return random() < 0.5 ? `s${Math.floor(random() * 100)}` : Math.floor(random() * 100);
  const width = 1 + Math.floor(random() * 3);
  if (roll < 0.45) return Array.from({ length: width }, () => randomBody(random, depth - 1));
  return Object.fromEntries(Array.from({ length: width }, () => [NAMES[Math.floor(random() * NAMES.length)]!, randomBody(random, depth - 1)]));
}

function randomPath(random: () => number): string {
  let path = '$';
  const steps = 1 + Math.floor(random() * 4);
  for (let i = 0; i < steps; i++) {
    const dots = random() < 0.6 ? '..' : '.';
    const roll = random();
    if (roll < 0.2) path += `${dots}*`;
    else if (roll < 0.35) path += `${dots === '..' ? '..' : ''}[${Math.floor(random() * 2)}]`;
    else path += `${dots}${NAMES[Math.floor(random() * NAMES.length)]!}`;
  }
  return path;
}

describe('jsonPathText: chained descendant steps', () => {
  it('go through a deep chain once per step, not once per node an earlier step selected', () => {
    const depth = 60;
    for (const path of ['$..a..b', '$..a..a..b', '$..a..a..a..b', '$..*..*..*..b']) {
      const reads = { count: 0 };
      assert.equal(jsonPathText({ x: countedChain(depth, reads) }, path, 'inbox.sources.s.idempotencyKeyPath'), undefined, path);
      const steps = path.split('..').length - 1;
      // Each `..` step lists each object's members at most once, and each object's selection reads them once more.
      assert.ok(reads.count <= 2 * steps * depth, `${path}: ${reads.count} reads of ${depth} objects, at most ${2 * steps * depth} expected`);
    }
  });

  it('select the first node of the whole node list, as RFC 9535 reads the path, on random bodies and paths', () => {
    const random = randomOf(20261207);
    let compared = 0;
    let found = 0;
    for (let draw = 0; draw < 3_000; draw++) {
      const body = { root: randomBody(random, 6) };
      const path = randomPath(random);
      const parsed = jsonPathSteps(path);
      assert.ok(!('problem' in parsed), `${path}: ${'problem' in parsed ? parsed.problem : ''}`);
      const first = nodeList(body, parsed.steps)[0];
      const expected = first === undefined || first === null || first === '' ? undefined : typeof first === 'object' ? 'container' : String(first);
      let actual: string | undefined;
      try {
        actual = jsonPathText(body, path, 'inbox.sources.s.idempotencyKeyPath');
      } catch {
        actual = 'container';
      }
      assert.equal(actual, expected, `draw ${draw}: ${path} on ${JSON.stringify(body)}`);
      compared++;
      if (expected !== undefined) found++;
    }
    assert.equal(compared, 3_000);
    // The draws are worth something only if many of them select a value.
    assert.ok(found > 600, `only ${found} of 3,000 draws selected anything`);
  });
});
