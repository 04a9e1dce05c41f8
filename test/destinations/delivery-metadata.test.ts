/**
 * The delivery headers every destination derives from a row, and the SQS attribute rules applied
 * to them.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { correlationIdOf, deliveryHeaders } from '../../lib/destinations/delivery-metadata.ts';
import { invalidAttributeNameReason, sqsMessageAttributes } from '../../lib/destinations/sqs-message-attributes.ts';
import { outboundMessage } from '../helpers/outbound-message.ts';

describe('delivery headers', () => {
  it('puts the standard headers first and keeps the row id authoritative over a row header of the same name', () => {
    const row = outboundMessage({ key: 'k-1', attempt: 3, headers: { 'x-message-id': 'spoofed', 'X-CORRELATION-ID': 'c-7', tenant: 'acme' } });
    assert.deepEqual(deliveryHeaders(row), [
      ['X-Message-Id', row.id],
      ['X-Topic', 'order.paid'],
      ['X-Attempt', '3'],
      ['X-Message-Key', 'k-1'],
      ['X-Correlation-Id', 'c-7'],
      ['tenant', 'acme'],
    ]);
  });

  it('carries non-string header values written by plain SQL as JSON text and leaves out empty values', () => {
    const headers = { retries: 3, flags: { a: true }, empty: '', nothing: null } as unknown as Record<string, string>;
    assert.deepEqual(deliveryHeaders(outboundMessage({ headers })).slice(3), [
      ['retries', '3'],
      ['flags', '{"a":true}'],
    ]);
  });

  it('leaves out X-Topic for an empty topic (plain SQL may write one; SQS refuses empty attribute values)', () => {
    const row = outboundMessage({ topic: '', headers: {} });
    assert.deepEqual(deliveryHeaders(row), [
      ['X-Message-Id', row.id],
      ['X-Attempt', '0'],
    ]);
  });

  it('finds the correlation id in any casing and ignores an empty one', () => {
    assert.equal(correlationIdOf({ 'X-Correlation-ID': 'c-1' }), 'c-1');
    assert.equal(correlationIdOf({ 'x-correlation-id': '' }), null);
    assert.equal(correlationIdOf({}), null);
  });
});

describe('SQS attribute names', () => {
  const cases: Array<[string, RegExp | null]> = [
    ['x-source', null],
    ['Tenant_Id.v2', null],
    ['a'.repeat(256), null],
    ['a'.repeat(257), /257 characters long; SQS allows 256/],
    ['', /is empty/],
    ['with space', /letters, digits/],
    ['ünï', /letters, digits/],
    ['AWS.Trace', /reserved by AWS/],
    ['amazon.thing', /reserved by AWS/],
    ['.lead', /start or end with a period/],
    ['trail.', /start or end with a period/],
    ['a..b', /two periods in a row/],
  ];
  for (const [name, reason] of cases) {
    it(`${reason ? 'refuses' : 'accepts'} "${name.length > 20 ? `${name.slice(0, 10)}…(${name.length})` : name}"`, () => {
      const actual = invalidAttributeNameReason(name);
      if (reason === null) assert.equal(actual, null);
      else assert.match(actual ?? '', reason);
    });
  }

  it('refuses an attribute value with characters SQS does not accept', () => {
    const result = sqsMessageAttributes(outboundMessage({ headers: { note: 'bell\u0007' } }));
    assert.deepEqual(result, { ok: false, error: 'header "note" contains characters that SQS does not accept in attribute values' });
  });

  it('sends a row header named __proto__ as an attribute like any other', () => {
    const headers = JSON.parse('{"__proto__":"v1","tenant":"acme"}') as Record<string, string>;
    const result = sqsMessageAttributes(outboundMessage({ headers }));
    assert.ok(result.ok);
    assert.deepEqual(Object.keys(result.attributes), ['X-Message-Id', 'X-Topic', 'X-Attempt', '__proto__', 'tenant']);
    assert.deepEqual(Object.getOwnPropertyDescriptor(result.attributes, '__proto__')?.value, { DataType: 'String', StringValue: 'v1' });
  });

  it('counts attribute bytes as SQS does: name, data type and value', () => {
    const row = outboundMessage({ id: 'id-1', topic: 't', headers: {} });
    const result = sqsMessageAttributes(row);
    const expected = ['X-Message-Id', 'id-1', 'X-Topic', 't', 'X-Attempt', '0'].join('').length + 3 * 'String'.length;
    assert.deepEqual(result.ok && result.bytes, expected);
  });
});
