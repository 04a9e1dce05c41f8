/**
 * `database.urlEnv` naming a variable that is not set stops every command with the same error,
 * naming the key and the variable: `status`, `console` (which never falls back to a local run's
 * embedded database for it) and `local` (which starts an embedded PostgreSQL only when the
 * configuration names no database at all).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runCli } from '../../bin/cli-program.ts';
import { writeLocalRunFile } from '../../lib/console/local-run-file.ts';
import { consoleConfig } from '../../lib/console/run-console.ts';
import { ConfigError } from '../../lib/errors.ts';
import { runLocal } from '../../lib/local/local-runner.ts';

const MISSING = 'QUEUEBOX_TEST_DB_URL_NOT_SET';
const EXPECTED = new RegExp(`database\\.urlEnv: names environment variable ${MISSING}, which is not set`);

describe('database.urlEnv naming an unset variable', { timeout: 120_000 }, () => {
  let dir: string;
  let configPath: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'qb-url-env-'));
    configPath = join(dir, 'queuebox.yml');
    writeFileSync(
      configPath,
      `database:\n  urlEnv: ${MISSING}\n  schema: url_env_unset\ndestinations:\n  orders: { type: sqs, queueUrl: https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo }\noutbox:\n  routes:\n    - { topicPattern: '**', destination: orders }\n`,
    );
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('queuebox status names database.urlEnv and the variable (DATABASE_URL set or not)', async () => {
    let stderr = '';
    const code = await runCli(['--config', configPath, 'status'], { stdout: () => {}, stderr: (t) => (stderr += t), env: { DATABASE_URL: 'postgres://127.0.0.1:1/unused' } });
    assert.equal(code, 1);
    assert.match(stderr, EXPECTED);
  });

  it('queuebox console names database.urlEnv, even while a local run publishes its database', async () => {
    const runFile = join(dir, 'local-run.json');
    writeLocalRunFile({ url: 'postgres://queuebox:x@127.0.0.1:1/queuebox', schema: 'public', marker: 'mark' }, runFile);
    for (const localRunFile of [join(dir, 'no-local-run.json'), runFile]) {
      await assert.rejects(consoleConfig({ configPath, env: { DATABASE_URL: 'postgres://127.0.0.1:1/unused' }, stderr: () => {}, localRunFile }), (error: unknown) => {
        assert.ok(error instanceof ConfigError, String(error));
        assert.equal(error.key, 'database.urlEnv', error.message);
        assert.match(error.message, EXPECTED);
        return true;
      });
    }
  });

  it('queuebox local stops naming database.urlEnv instead of running against an embedded PostgreSQL', async () => {
    const lines: string[] = [];
    await assert.rejects(
      runLocal({ configPath, demo: false, exitWhenDrained: true, env: { PATH: process.env.PATH, HOME: process.env.HOME }, out: (line) => lines.push(line) }),
      (error: unknown) => {
        assert.ok(error instanceof ConfigError, String(error));
        assert.equal(error.key, 'database.urlEnv', error.message);
        assert.match(error.message, EXPECTED);
        return true;
      },
    );
    assert.ok(!lines.some((line) => /embedded/.test(line)), lines.join('\n'));
  });
});
