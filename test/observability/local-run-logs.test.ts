/**
 * In `npm start` the scheduled functions and the webhook handler run at the same time in one
 * process, as concurrent invocations of one Lambda environment. Each log line still carries the
 * request id and function name of its own invocation, not of whichever invocation started last.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import { runLocal } from '../../lib/local/local-runner.ts';
import { testDatabaseUrl } from '../helpers/database.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

describe('local run logs', () => {
  const schema = `qb_local_logs_${randomBytes(5).toString('hex')}`;
  const pool = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
  after(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  it('keep each overlapping invocation’s own function name and request id', async () => {
    const progress: string[] = [];
    const { result: summary, lines } = await captureStdout(() =>
      runLocal({ schema, messages: 6, exitWhenDrained: true, env: { ...process.env, QUEUEBOX_CONFIG: '' }, out: (line) => progress.push(line) }),
    );
    assert.equal(summary.stoppedBecause, 'drained', progress.join('\n'));
    const logs = lines.filter((l) => l.startsWith('{"level"')).map((l) => JSON.parse(l) as Record<string, unknown>);
    const poller = logs.filter((l) => l.message === 'outbox pass finished');
    const relay = logs.filter((l) => l.message === 'inbox relay pass');
    assert.ok(poller.length > 0 && relay.length > 0, `both functions logged: ${logs.map((l) => l.message).join(', ')}`);
    for (const line of poller) assert.equal(line.function_name, 'queuebox-local-outboxPoller');
    for (const line of relay) assert.equal(line.function_name, 'queuebox-local-inboxRelay');
    const ids = new Set([...poller, ...relay].map((l) => l.function_request_id));
    assert.equal(ids.size, poller.length + relay.length, 'one request id per invocation');
    assert.equal(process.env.AWS_LAMBDA_MAX_CONCURRENCY, undefined, 'the run leaves the environment as it found it');
  });
});
