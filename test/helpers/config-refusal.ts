/** The `ConfigError` that `fn` (a config load) throws; fails the test when it throws none or another error. */
import assert from 'node:assert/strict';
import { ConfigError } from '../../lib/errors.ts';

export function refusal(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof ConfigError, `expected ConfigError, got ${String(error)}`);
    return error;
  }
  assert.fail('expected a ConfigError');
}
