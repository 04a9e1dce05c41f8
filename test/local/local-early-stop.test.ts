/**
 * `queuebox local` stopped while it starts up (Ctrl-C, SIGTERM, or `| head` closing its output):
 * no invocation starts once stopping has begun, so none starts with no time to claim and logs the
 * advice meant for a timeout too short for `lambda.deadlineMarginMs`; an invocation started just
 * before the stop starts with its own time and is cut short as a Lambda near its timeout.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, describe, it } from 'node:test';
import pg from 'pg';
import { runLocal } from '../../lib/local/local-runner.ts';
import { testDatabaseUrl } from '../helpers/database.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

describe('local run stopped during start-up', () => {
  const schemas: string[] = [];
  const pool = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
  after(async () => {
    for (const schema of schemas) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });

  // The stop arrives as the line is printed: before the schedules load, before the poller's first
  // invocation, and between the poller's first invocation and the relay's.
  for (const [stopAt, invocations] of [
    ['demo queues: ', 0],
    ['outboxPoller: ', 0],
    ['inboxRelay: ', 1],
  ] as const) {
    it(`stopped at "${stopAt.trim()}": ${invocations} invocation(s) start, none logs "no time to claim"`, async () => {
      const schema = `qb_local_early_${randomBytes(5).toString('hex')}`;
      schemas.push(schema);
      const stop = new AbortController();
      const printed: string[] = [];
      const { result: summary, lines } = await captureStdout(
        () =>
          runLocal({
            schema,
            signal: stop.signal,
            env: { ...process.env, QUEUEBOX_CONFIG: '' },
            out: (line) => {
              printed.push(line);
              if (line.startsWith(stopAt)) stop.abort();
            },
          }),
        { stderr: true },
      );
      const logs = lines.filter((l) => l.startsWith('{"level"')).map((l) => JSON.parse(l) as { level: string; message: string });
      assert.deepEqual(
        logs.filter((l) => l.level === 'ERROR' || /no time to claim/.test(l.message)),
        [],
        `no error logged\n${printed.join('\n')}`,
      );
      assert.equal(summary.stoppedBecause, 'signal');
      assert.equal(summary.invocations, invocations, printed.join('\n'));
      assert.ok(printed.includes('stopping: no new invocations; waiting for the running ones to finish…'), printed.join('\n'));
    });
  }
});
