/**
 * The two redacted forms of an error besides `redactError`'s text: `redactedError`, the error a
 * log line carries (a copy: name, redacted and bounded message, the stack's frames under that
 * message, `code`, cause alike), and `redactThrown`, the error a Lambda handler throws (redacted in
 * place, so its class, identity and data stay). Neither throws on an odd thrown value.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LAST_ERROR_MAX_LENGTH, redactedError, redactThrown, throwingRedacted } from '../../lib/claims/redact.ts';
import { OutboxPassError } from '../../lib/outbox/outbox-pass.ts';

const SECRETS = /hunter2|s3cr3t/;
const LEAK = 'server postgres://u:hunter2@h/db password=s3cr3t';

class DriverError extends Error {
  override readonly name = 'DriverError';
}

describe('redactedError: the error a log line carries', () => {
  it('keeps the name, the code and the stack frames; redacts the message, the stack header and the cause; leaves the original as it was', () => {
    const cause = new Error(`socket closed by ${LEAK}`);
    const original = Object.assign(new DriverError(`connection failed: ${LEAK}`, { cause }), { code: '08006', detail: 'Key (token)=(abc) already exists' });
    const copy = redactedError(original);
    assert.notEqual(copy, original);
    assert.equal(copy.name, 'DriverError');
    assert.equal(copy.message, 'connection failed: server postgres://***@h/db password=***');
    assert.equal((copy as { code?: unknown }).code, '08006');
    assert.equal((copy as { detail?: unknown }).detail, undefined, 'other fields of a driver error can quote row values: left out');
    assert.match(String(copy.stack), /^DriverError: connection failed: server postgres:\/\/\*\*\*@h\/db password=\*\*\*\n {4}at /);
    assert.ok(String(copy.stack).includes('redacted-error.test.ts'), 'the frames name the code that threw');
    assert.doesNotMatch(String(copy.stack), SECRETS);
    assert.ok(copy.cause instanceof Error);
    assert.equal(copy.cause.message, 'socket closed by server postgres://***@h/db password=***');
    assert.match(original.message, /hunter2/, 'the original is not changed');
  });

  it('bounds the message and the header as redactError bounds its text', () => {
    const copy = redactedError(new Error(`${LEAK} ${'x'.repeat(5000)}`));
    assert.equal(copy.message.length, LAST_ERROR_MAX_LENGTH);
    assert.ok(copy.message.endsWith('…'));
    assert.doesNotMatch(String(copy.stack), SECRETS);
    assert.ok(String(copy.stack).length < 2 * LAST_ERROR_MAX_LENGTH + 200, `stack of ${String(copy.stack).length} characters`);
  });

  it('turns any thrown value into an Error of its redacted text, without a stack of its own', () => {
    assert.equal(redactedError(`refused: ${LEAK}`).message, 'refused: server postgres://***@h/db password=***');
    assert.equal(redactedError({ url: 'postgres://u:hunter2@h/db' }).message, '{"url":"postgres://***@h/db"}');
    assert.equal(redactedError(Object.create(null)).message, '{}');
    assert.equal(redactedError(undefined).message, 'undefined');
    assert.equal(redactedError('boom').stack, 'Error: boom');
    const hostile = new Proxy(new Error('x'), {
      get() {
        throw new Error('a getter that throws');
      },
    });
    assert.ok(redactedError(hostile) instanceof Error);
  });

  it('follows a cycle of causes a bounded number of times', () => {
    const a = new Error(`a ${LEAK}`);
    const b = new Error(`b ${LEAK}`, { cause: a });
    Object.defineProperty(a, 'cause', { value: b });
    let depth = 0;
    for (let e: unknown = redactedError(a); e instanceof Error; e = e.cause) {
      assert.doesNotMatch(e.message, SECRETS);
      depth++;
    }
    assert.ok(depth <= 5, `${depth} levels`);
  });
});

describe('redactThrown: the error a handler throws', () => {
  it('redacts message, stack and cause in place: the same object, its class and its data kept', () => {
    const summary = { claimed: 1 } as unknown as OutboxPassError['summary'];
    const error = new OutboxPassError(summary, new Error(`reclaim failed: ${LEAK}`));
    Object.defineProperty(error, 'message', { value: `outbox pass failed: ${LEAK}`, writable: true, configurable: true });
    const thrown = redactThrown(error);
    assert.equal(thrown, error);
    assert.ok(thrown instanceof OutboxPassError);
    assert.equal(error.summary, summary);
    assert.equal(error.message, 'outbox pass failed: server postgres://***@h/db password=***');
    assert.doesNotMatch(String(error.stack), SECRETS);
    assert.doesNotMatch((error.cause as Error).message, SECRETS);
  });

  it('does not bound the message: a long list of issues stays whole', () => {
    const error = new Error(`${'- a line\n'.repeat(400)}${LEAK}`);
    redactThrown(error);
    assert.ok(error.message.length > LAST_ERROR_MAX_LENGTH);
    assert.doesNotMatch(error.message, SECRETS);
  });

  it('a frozen error, a string or another value comes back redacted, never a throw', () => {
    const frozen = Object.freeze(new DriverError(`frozen: ${LEAK}`));
    const copy = redactThrown(frozen) as Error;
    assert.equal(copy.name, 'DriverError');
    assert.doesNotMatch(copy.message, SECRETS);
    assert.equal(redactThrown(`thrown text: ${LEAK}`), 'thrown text: server postgres://***@h/db password=***');
    assert.doesNotMatch((redactThrown({ message: LEAK }) as Error).message, SECRETS);
    assert.ok(redactThrown(null) instanceof Error);
  });

  it('throwingRedacted: a handler that throws throws the same error redacted; one that returns, returns', async () => {
    const error = new DriverError(`pass failed: ${LEAK}`);
    const failing = throwingRedacted(async (_event: unknown) => Promise.reject(error));
    await assert.rejects(failing({}), (thrown: unknown) => thrown === error && !SECRETS.test(error.message) && !SECRETS.test(String(error.stack)));
    assert.equal(await throwingRedacted(async (n: number) => n + 1)(1), 2);
  });
});
