/**
 * The scan of an EventBridge `Detail` text for the JSON limits `PutEvents` documents: integers
 * within a signed 64-bit long, nesting up to 1,000 levels. Strings (escapes included) are skipped;
 * numbers with a fraction or an exponent are not integers.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EVENTBRIDGE_MAX_DETAIL_DEPTH, eventBridgeDetailLimitError } from '../../lib/destinations/eventbridge-json-limits.ts';

const classOf = (text: string) => eventBridgeDetailLimitError(text)?.errorClass;

/** `{"d":` … `}` nested `levels` deep around `inner` (objects and arrays alternating). */
function nested(levels: number, inner = '1'): string {
  let text = inner;
  for (let i = 0; i < levels; i++) text = i % 2 === 0 ? `{"d": ${text}}` : `[${text}]`;
  return text;
}

describe('EventBridge Detail JSON limits', () => {
  it('passes every integer within the signed 64-bit range, beyond 2^53 included', () => {
    for (const n of ['0', '-0', '9007199254740993', '9223372036854775807', '-9223372036854775808', '999999999999999999', '-999999999999999999']) {
      assert.equal(eventBridgeDetailLimitError(`{"n": ${n}, "list": [${n}, ${n}]}`), undefined, n);
    }
  });

  it('refuses an integer outside the range, naming it and the range', () => {
    for (const n of ['9223372036854775808', '-9223372036854775809', '10000000000000000000', '12345678901234567890123', '-98765432109876543210987654321']) {
      const refusal = eventBridgeDetailLimitError(`{"a": [1, {"n": ${n}}], "z": true}`);
      assert.equal(refusal?.errorClass, 'IntegerOutOfRange', n);
      assert.equal(
        refusal?.error,
        `event detail has the integer ${n}, outside the signed 64-bit range EventBridge PutEvents accepts (-9223372036854775808 to 9223372036854775807)`,
      );
    }
    const long = '1'.repeat(60);
    assert.match(eventBridgeDetailLimitError(`{"n":${long}}`)!.error, new RegExp(`integer ${'1'.repeat(40)}… \\(60 characters\\), outside`));
  });

  it('lets numbers with a fraction or an exponent through: they are not integers', () => {
    for (const n of ['12345678901234567890.0', '0.1000000000000000055511151231257827', '1e400', '-12345678901234567890123E-2', '9223372036854775808.5', '1.0E+30']) {
      assert.equal(eventBridgeDetailLimitError(`{"n": ${n}}`), undefined, n);
    }
  });

  it('skips digits and brackets inside strings, escaped quotes included', () => {
    assert.equal(classOf('{"id": "12345678901234567890123", "k": "a\\"12345678901234567890123"}'), undefined);
    assert.equal(classOf('{"12345678901234567890123": 1}'), undefined);
    assert.equal(classOf(`{"s": "${'['.repeat(5000)}\\\\", "t": "\\"${'{'.repeat(5000)}"}`), undefined);
    assert.equal(classOf('{"s": "x\\\\", "n": 12345678901234567890123}'), 'IntegerOutOfRange', 'an escaped backslash ends the string before the number');
  });

  it('allows 1,000 levels of nesting and refuses 1,001, objects and arrays alike', () => {
    assert.equal(EVENTBRIDGE_MAX_DETAIL_DEPTH, 1000);
    assert.equal(classOf(nested(1000)), undefined);
    assert.equal(classOf(nested(1000, '[]')), 'DetailTooDeep');
    assert.equal(classOf(nested(1001)), 'DetailTooDeep');
    assert.equal(classOf(nested(1001, '"x"')), 'DetailTooDeep');
    assert.match(eventBridgeDetailLimitError(nested(1200))!.error, /^event detail nests deeper than 1000 levels \(the envelope is the first, so the payload may nest 999\); EventBridge PutEvents processes JSON up to 1000 levels deep$/);
    const wide = `[${Array.from({ length: 3000 }, () => nested(10)).join(',')}]`;
    assert.equal(classOf(wide), undefined, 'many shallow members are not deep');
  });

  it('reports the integer of a text that is both deep and has one out of range by whichever comes first', () => {
    assert.equal(classOf(`{"n": 12345678901234567890123, "d": ${nested(1001)}}`), 'IntegerOutOfRange');
    assert.equal(classOf(`{"d": ${nested(1001)}, "n": 12345678901234567890123}`), 'DetailTooDeep');
  });
});
