/**
 * Logs as Powertools users expect them: the level comes from `POWERTOOLS_LOG_LEVEL`, and every
 * line a handler writes carries its invocation's request id and whether it was the container's
 * cold start. The handlers run with the real container (built from the environment, as on
 * Lambda) and the real Powertools Logger writing to standard output, which the test reads.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { Context } from 'aws-lambda';
import { handler as relayHandler } from '../../functions/inbox-relay.ts';
import { handler as migrateHandler } from '../../functions/migrate.ts';
import { handler as pollerHandler } from '../../functions/outbox-poller.ts';
import { handler as reclaimHandler } from '../../functions/reclaim.ts';
import { handler as replayHandler } from '../../functions/replay.ts';
import { handler as retentionHandler } from '../../functions/retention.ts';
import { loadConfig } from '../../lib/config/load-config.ts';
import { ConfigError } from '../../lib/errors.ts';
import { getContainer, setContainer } from '../../lib/runtime/container.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

type Line = Record<string, unknown>;

/** The JSON log lines `work` writes (EMF lines left out). */
async function logLinesOf(work: () => Promise<unknown>): Promise<Line[]> {
  const { lines } = await captureStdout(work);
  return lines
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Line)
    .filter((l) => !('_aws' in l));
}

describe('log level from POWERTOOLS_LOG_LEVEL', () => {
  it('sets observability.logLevel over the file, in any case; a QueueBox override wins over it', () => {
    const input = { observability: { logLevel: 'WARN' as const } };
    assert.equal(loadConfig({ input, env: {} }).observability.logLevel, 'WARN');
    assert.equal(loadConfig({ input, env: { POWERTOOLS_LOG_LEVEL: 'debug' } }).observability.logLevel, 'DEBUG');
    assert.equal(loadConfig({ env: { POWERTOOLS_LOG_LEVEL: 'CRITICAL' } }).observability.logLevel, 'CRITICAL');
    assert.equal(loadConfig({ input, env: { POWERTOOLS_LOG_LEVEL: 'DEBUG', QUEUEBOX_OBSERVABILITY__LOG_LEVEL: 'ERROR' } }).observability.logLevel, 'ERROR');
  });

  it('refuses an unknown level, naming the variable', () => {
    assert.throws(
      () => loadConfig({ env: { POWERTOOLS_LOG_LEVEL: 'verbose' } }),
      (error: unknown) => error instanceof ConfigError && /POWERTOOLS_LOG_LEVEL: is "verbose"; expected one of TRACE, DEBUG/.test(error.message),
    );
  });
});

describe('handler log lines', () => {
  let db: TestDatabase;
  const saved = { ...process.env };

  before(async () => {
    db = await createTestDatabase();
    Object.assign(process.env, {
      QUEUEBOX_DATABASE_URL: db.url,
      QUEUEBOX_DATABASE__SCHEMA: db.schema,
      QUEUEBOX_LAMBDA__DEADLINE_MARGIN_MS: '1000',
      QUEUEBOX_OUTBOX__POLL_INTERVAL_MS: '50',
      // What Lambda sets for an on-demand environment; Powertools reports cold starts only then.
      AWS_LAMBDA_INITIALIZATION_TYPE: 'on-demand',
    });
    delete process.env.QUEUEBOX_CONFIG;
  });
  after(async () => {
    setContainer(undefined);
    for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
    await db.drop();
  });

  it('carry the request id of their invocation on every line, and cold_start only on the container’s first', async () => {
    process.env.POWERTOOLS_LOG_LEVEL = 'info';
    setContainer(undefined);
    const contexts: Context[] = [];
    const invoke = async (run: (context: Context) => Promise<unknown>) => {
      const context = fakeLambdaContext({ functionName: 'queuebox-test', timeoutMs: 1600 });
      contexts.push(context);
      return logLinesOf(() => run(context));
    };
    const perInvocation = [
      await invoke((c) => reclaimHandler({ source: 'aws.events' }, c)),
      await invoke((c) => reclaimHandler({ force: true }, c)),
      await invoke((c) => retentionHandler({}, c)),
      await invoke((c) => replayHandler({ states: ['dead'], topics: ['nothing.here'] }, c)),
      await invoke((c) => relayHandler({}, c)),
      await invoke((c) => pollerHandler({}, c)),
    ];
    perInvocation.forEach((lines, i) => {
      assert.ok(lines.length > 0, `invocation ${i} logged`);
      for (const line of lines) {
        assert.equal(line.function_request_id, contexts[i]!.awsRequestId, `line ${JSON.stringify(line)}`);
        assert.equal(line.function_name, 'queuebox-test');
        assert.equal(line.cold_start, i === 0, `cold_start of invocation ${i}`);
        assert.equal(line.service, 'queuebox');
      }
    });
    assert.deepEqual(
      perInvocation.map((lines) => lines.map((l) => l.message)),
      [['reclaim finished'], ['reclaim finished'], ['retention is disabled (retention.enabled = false)'], ['replay finished'], ['inbox relay pass'], ['outbox pass finished']],
    );
  });

  it('follow POWERTOOLS_LOG_LEVEL: WARN hides the info lines, and the migrate function (its own logger) carries the context too', async () => {
    process.env.POWERTOOLS_LOG_LEVEL = 'WARN';
    setContainer(undefined);
    assert.equal((await getContainer()).logger.getLevelName(), 'WARN');
    assert.deepEqual(await logLinesOf(() => reclaimHandler({ force: true }, fakeLambdaContext({ timeoutMs: 1600 }))), []);

    process.env.POWERTOOLS_LOG_LEVEL = 'DEBUG';
    const context = fakeLambdaContext({ functionName: 'queuebox-migrate', timeoutMs: 5000 });
    const lines = await logLinesOf(() => migrateHandler({}, context));
    assert.deepEqual(
      lines.map((l) => [l.level, l.message, l.function_request_id, l.cold_start]),
      [['INFO', 'migrations applied', context.awsRequestId, true]],
    );
  });

  it('are set up in every function under functions/ (each handler adds its Lambda context first)', () => {
    const dir = new URL('../../functions/', import.meta.url);
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
      const text = readFileSync(new URL(file, dir), 'utf8');
      assert.match(text, /logger\.addContext\(context\)/, `${file} adds the invocation context to its logger`);
    }
  });
});
