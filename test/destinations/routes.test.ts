/**
 * Topic routing: anchored patterns, `*` as one dot-free segment, `**` as any text (line breaks
 * included), first match wins, and the same semantics in PostgreSQL through `topicPatternSource`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pg from 'pg';
import { ConfigError } from '../../lib/errors.ts';
import { compileTopicPattern, createRouter, topicPatternSource } from '../../lib/outbox/routes.ts';
import { testDatabaseUrl } from '../helpers/database.ts';

const table: Array<[pattern: string, topic: string, matches: boolean]> = [
  ['order.paid', 'order.paid', true],
  ['order.paid', 'order.paid.v2', false],
  ['order.paid', 'xorder.paid', false],
  ['order.paid', 'orderXpaid', false],
  ['order.*', 'order.paid', true],
  ['order.*', 'order.', false],
  ['order.*', 'order.paid.v2', false],
  ['order.*', 'order', false],
  ['*.paid', 'order.paid', true],
  ['*.paid', '.paid', false],
  ['*.*', 'a.b', true],
  ['*.*', 'a.b.c', false],
  ['order.**', 'order.paid', true],
  ['order.**', 'order.paid.v2', true],
  ['order.**', 'order.', true],
  ['order.**', 'order', false],
  ['**', '', true],
  ['**', 'anything.at.all', true],
  ['**.v2', 'order.paid.v2', true],
  ['**.v2', 'order.paid.v3', false],
  ['order.**.v2', 'order.v2', false],
  ['order.**.v2', 'order..v2', true],
  ['order.**.v2', 'order.paid.x.v2', true],
  ['a*', 'abc', true],
  ['a*', 'a', false],
  ['a*', 'a.b', false],
  ['billing/(eu)+', 'billing/(eu)+', true],
  ['billing/(eu)+', 'billing/eueu', false],
  ['price$[1]', 'price$[1]', true],
  ['a|b', 'a', false],
  ['ünïcode.*', 'ünïcode.ok', true],
  // Every character, line breaks included: `**` is any text, `*` any dot-free segment.
  ['**', 'a\nb', true],
  ['**', 'order.paid\r\n', true],
  ['**', 'x\u2028y', true],
  ['**', 'x\u2029y', true],
  ['order.**', 'order.\n', true],
  ['**.v2', 'a\n.v2', true],
  ['order.*', 'order.pa\nid', true],
  ['order.*', 'order.\n.x', false],
  ['order.paid', 'order.paid\n', false],
];

describe('routes', () => {
  for (const [pattern, topic, matches] of table) {
    it(`pattern "${pattern}" ${matches ? 'matches' : 'does not match'} topic ${JSON.stringify(topic)}`, () => {
      assert.equal(compileTopicPattern(pattern).test(topic), matches);
    });
  }

  it('takes the first matching route, in order', () => {
    const route = createRouter(
      [
        { topicPattern: 'order.paid', destination: 'payments' },
        { topicPattern: 'order.*', destination: 'orders' },
        { topicPattern: '**', destination: 'everything' },
      ],
      { payments: {}, orders: {}, everything: {} },
    );
    assert.equal(route('order.paid'), 'payments');
    assert.equal(route('order.shipped'), 'orders');
    assert.equal(route('order.shipped.late'), 'everything');
    assert.equal(route(''), 'everything');
  });

  it('answers undefined when no route matches', () => {
    const route = createRouter([{ topicPattern: 'order.*', destination: 'orders' }]);
    assert.equal(route('customer.created'), undefined);
    assert.equal(createRouter([])('order.paid'), undefined);
  });

  it('refuses a route to an undefined destination with a ConfigError naming the key', () => {
    assert.throws(
      () => createRouter([{ topicPattern: 'a', destination: 'x' }, { topicPattern: 'b', destination: 'nope' }], { x: {} }),
      (error: unknown) => error instanceof ConfigError && error.key === 'outbox.routes.1.destination' && /"nope"/.test(error.message),
    );
  });

  it('gives PostgreSQL the same answers as JavaScript for the same pattern source', async () => {
    const pool = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
    try {
      const { rows } = await pool.query<{ i: number; m: boolean }>(
        'SELECT i, t ~ p AS m FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS x(p, t, i) ORDER BY i',
        [table.map(([pattern]) => topicPatternSource(pattern)), table.map(([, topic]) => topic)],
      );
      assert.deepEqual(rows.map((r) => r.m), table.map(([, , matches]) => matches));
    } finally {
      await pool.end();
    }
  });
});
