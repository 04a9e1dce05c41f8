/**
 * What runs around a pass logs the errors it meets redacted: scale-out (a check, an invoke or a
 * slot's release that failed), the heartbeat's stamp, a source secret's read again. Each line
 * keeps its message and what it had — a text (`redactError`: name and message) or an error (name,
 * code, message, stack with its frames) — with the secrets masked. A driver's or SDK's message can
 * carry a connection string with its password or a `password=` pair. Before, these lines carried
 * `String(error)` or the error whole.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseConfig } from '../../lib/config/load-config.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { recordPassFinished } from '../../lib/runtime/pass-heartbeat.ts';
import { joinScaleOut, SCALE_OUT_EVENT_KEY, type ScaleOutDriver } from '../../lib/runtime/scale-out.ts';
import type { SecretStores } from '../../lib/runtime/secrets.ts';
import { loadSourceSecrets } from '../../lib/runtime/source-secrets.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { captureStdout } from '../helpers/stdout-capture.ts';

const SECRETS = /hunter2|s3cr3t/;
const REDACTED = 'connection to server failed: postgres://***@h/db password=***; is the server running?';

/** An error whose message carries a connection string with its password and a `password=` pair. */
function leakyError(): Error {
  return Object.assign(new Error('connection to server failed: postgres://u:hunter2@h/db password=s3cr3t; is the server running?'), { code: '08001' });
}

type Line = Record<string, unknown>;

/** The JSON lines the real Powertools Logger writes while `work` runs (`logger` is handed to it). */
async function logged<T>(work: (logger: ReturnType<typeof createLogger>) => Promise<T>): Promise<{ result: T; lines: Line[] }> {
  const logger = createLogger({ serviceName: 'test', logLevel: 'INFO' });
  const { result, lines } = await captureStdout(() => work(logger), { stderr: true });
  return { result, lines: lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line) };
}

/** The lines with `message`: each with no secret, its `error` the redacted text. */
function assertRedactedText(lines: Line[], message: string, count = 1): void {
  const found = lines.filter((l) => l.message === message);
  assert.equal(found.length, count, `${count} × ${message}: ${JSON.stringify(lines)}`);
  for (const line of found) {
    assert.doesNotMatch(JSON.stringify(line), SECRETS);
    assert.equal(line.error, `Error: ${REDACTED}`);
  }
}

const metrics = () => new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} });
const deadline = () => createDeadline(fakeLambdaContext({ timeoutMs: 60_000 }), 1000);
const failing = () => Promise.reject(leakyError());

/** A promise `fired` that `fire()` resolves. */
function signal(): { fired: Promise<void>; fire(): void } {
  let fire!: () => void;
  const fired = new Promise<void>((resolve) => (fire = resolve));
  return { fired, fire };
}

describe('scale-out, heartbeat and secret reads log their errors redacted', () => {
  it('scale-out: an invoke that fails and the release of its slot that fails are logged redacted', async () => {
    const check = signal();
    const driver: ScaleOutDriver = {
      outboxCountDue: async () => {
        check.fire();
        return 1_000_000;
      },
      inboxCountDue: async () => 0,
      scaleOutAcquire: async () => [{ slot: 1, token: '1' }],
      scaleOutStart: async () => undefined,
      scaleOutRelease: failing,
    };
    const { result: report, lines } = await logged(async (logger) => {
      const joined = await joinScaleOut({ worker: 'outboxPoller', driver, maxConcurrentPasses: 2, functionName: 'poller', event: {}, deadline: deadline(), metrics: metrics(), logger, invoke: failing, checkDelayMs: 1 });
      // One row finished however soon the check runs: a rate that cannot drain 1,000,000 rows by the deadline, so a pass is wanted.
      joined.hook.passStarted(() => 1);
      // The check runs once its delay has passed; `passEnded` waits for a check under way, not for one to come.
      await check.fired;
      await joined.hook.passEnded();
      return joined.report;
    });
    assert.deepEqual([report.started, report.failed], [0, 1]);
    assertRedactedText(lines, 'scale-out invoke failed: the pass goes on without it');
    assertRedactedText(lines, 'scale-out slot not freed: it frees itself when its lease ends');
  });

  it('scale-out: a check that fails is logged redacted', async () => {
    const check = signal();
    const driver: ScaleOutDriver = {
      outboxCountDue: () => {
        check.fire();
        return failing();
      },
      inboxCountDue: failing,
      scaleOutAcquire: failing,
      scaleOutStart: failing,
      scaleOutRelease: failing,
    };
    const { lines } = await logged(async (logger) => {
      const joined = await joinScaleOut({ worker: 'outboxPoller', driver, maxConcurrentPasses: 2, functionName: 'poller', event: {}, deadline: deadline(), metrics: metrics(), logger, invoke: failing, checkDelayMs: 1 });
      joined.hook.passStarted(() => 100);
      // The check runs once its delay has passed; `passEnded` waits for a check under way, not for one to come.
      await check.fired;
      await joined.hook.passEnded();
    });
    assertRedactedText(lines, 'scale-out check failed: no pass started');
  });

  it('scale-out: a started pass whose slot is not freed at its end logs it redacted', async () => {
    const driver: ScaleOutDriver = { outboxCountDue: failing, inboxCountDue: failing, scaleOutAcquire: failing, scaleOutStart: async ({ slot }) => slot, scaleOutRelease: failing };
    const event = { [SCALE_OUT_EVENT_KEY]: { worker: 'outboxPoller', generation: 1, slot: 1, token: '7' } };
    const { lines } = await logged(async (logger) => {
      const joined = await joinScaleOut({ worker: 'outboxPoller', driver, maxConcurrentPasses: 2, functionName: 'poller', event, deadline: deadline(), metrics: metrics(), logger, invoke: failing });
      assert.equal(joined.report.role, 'started');
      await joined.end();
    });
    assertRedactedText(lines, 'scale-out slot not freed: it frees itself when its lease ends');
  });

  it('heartbeat: a stamp the database refuses is logged redacted', async () => {
    const { lines } = await logged((logger) => recordPassFinished({ driver: { passRecordFinished: failing }, metrics: metrics(), logger, worker: 'reclaim', remainingMs: () => 1000 }));
    assertRedactedText(lines, 'the finished pass was not recorded in the database: queuebox status shows an earlier one');
  });

  it('source secrets: a read again that fails keeps the value held and logs its error redacted (name, code, message, stack)', async () => {
    const config = parseConfig({ inbox: { sources: { crm: { type: 'http', path: '/crm', auth: { type: 'bearer', tokenEnv: 'CRM_TOKEN' } } } } });
    let reads = 0;
    const ssm = { get: async () => (reads++ === 0 ? 'held-crm-token-00001' : failing()) };
    const stores = { ssm, secrets: ssm } as unknown as SecretStores;
    let clock = 1_800_000_000_000;
    const { result: value, lines } = await logged(async (logger) => {
      const secrets = await loadSourceSecrets({ env: { QUEUEBOX_SECRETS_PARAMETER_PATH: '/qb' }, config, stores, now: () => clock, logger });
      clock += 3_600_000;
      return secrets.current('CRM_TOKEN');
    });
    assert.equal(value, 'held-crm-token-00001');
    const line = lines.find((l) => l.message === 'source secret could not be read again; the value held is kept');
    assert.ok(line, JSON.stringify(lines));
    assert.doesNotMatch(JSON.stringify(line), SECRETS);
    const error = line.error as Record<string, unknown>;
    assert.deepEqual([error.name, error.code, error.message], ['Error', '08001', REDACTED]);
    assert.match(String(error.stack), /\n {4}at /, 'the stack keeps its frames');
  });
});
