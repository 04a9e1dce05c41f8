/**
 * Scale-out by backlog of the outbox poller when a claim takes several rows of a key
 * (`outbox.rowsPerKey`, 10 by default on PostgreSQL): whether the latest claim came back full is
 * judged by the heads of keys (and keyless rows) it took, which its limit is about — not by its
 * rows, which count the followers it filled the rest of the batch with. End to end as in
 * `scale-out.test.ts`: the deployed handler, a local endpoint of the Lambda Invoke API, the
 * started passes run as Lambda would, beside the scheduled pass, as soon as their invoke arrives.
 *
 * The destination takes 100 ms per call (8 calls of 10 entries at once).
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { createOutboxPoller, type OutboxPollerResult } from '../../functions/outbox-poller.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { startLocalLambda, type LocalLambda } from '../helpers/local-lambda.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

const FUNCTION = 'shop-test-queueboxOutboxPoller';

for (const rowsPerKey of [1, 10]) {
  describe(`outbox poller scale-out by backlog with rowsPerKey ${rowsPerKey}`, { timeout: 120_000 }, () => {
    let db: TestDatabase;
    let lambda: LocalLambda;
    let destination: RecordingDestination;
    let handler: ReturnType<typeof createOutboxPoller>;
    const invoke = (event: unknown = { source: 'aws.events' }) => handler(event, createInvocationContext({ functionName: FUNCTION, timeoutMs: 5000 }));
    const insertKeyed = (rows: number, keys: number) =>
      db.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) SELECT 't', 'k' || (g % $2::int), '{}' FROM generate_series(1, $1::int) g ORDER BY g`, [rows, keys]);

    /** The scheduled pass, and the passes it started, each run as soon as its invoke arrives. */
    const scheduledPass = async (): Promise<{ scheduled: OutboxPollerResult; started: OutboxPollerResult[] }> => {
      const started: Array<Promise<OutboxPollerResult>> = [];
      let seen = 0;
      const run = () => {
        while (seen < lambda.invocations.length) started.push(invoke(lambda.invocations[seen++]!.payload));
      };
      const poll = setInterval(run, 5);
      try {
        const scheduled = await invoke();
        run();
        return { scheduled, started: await Promise.all(started) };
      } finally {
        clearInterval(poll);
      }
    };

    before(async () => {
      db = await createTestDatabase({
        destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
        outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 20, maxBatchSize: 100, rowsPerKey, scaleOut: { maxConcurrentPasses: 4 } },
        lambda: { deadlineMarginMs: 1000 },
      });
      lambda = await startLocalLambda([FUNCTION]);
      setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'queuebox', logLevel: 'ERROR' }), env: {}, writeMetrics: () => {} });
      handler = createOutboxPoller({ buildDestinations: () => new Map([['main', destination]]), invoke: lambda.invoker() });
    });
    beforeEach(async () => {
      destination = new RecordingDestination({ delayMs: 100 });
      lambda.invocations.length = 0;
      await db.query(`DELETE FROM "${db.schema}".outbox`);
      await db.query(`DELETE FROM "${db.schema}".queuebox_maintenance`);
    });
    after(async () => {
      setContainer(undefined);
      await lambda.close();
      await db.drop();
    });

    it('a backlog held by 12 keys starts no pass: each claim took the head of every key that could move, with or without its next rows', async () => {
      // 1,000 rows per key: more than a pass can send, none of which another pass could claim
      // while this one holds the key.
      await insertKeyed(12_000, 12);
      const { scheduled, started } = await scheduledPass();
      const report = `scaleOut ${JSON.stringify(scheduled.scaleOut)}; started passes: ${started.map((r) => `claimed ${r.claimed}`).join(', ')}`;
      assert.ok(scheduled.sent > 0, report);
      assert.deepEqual(
        started.filter((r) => r.claimed === 0).map((r) => `claimed ${r.claimed}, sent ${r.sent}`),
        [],
        `started passes that claimed nothing (${report})`,
      );
      assert.deepEqual([scheduled.scaleOut.started, scheduled.scaleOut.failed], [0, 0], report);
      assert.equal(scheduled.scaleOut.due, undefined, `the due rows are not counted (${report})`);
      assert.equal(lambda.invocations.length, 0, report);
    });

    it('a backlog over 2,000 keys, more heads than a claim takes, still starts passes, and each claims rows', async () => {
      await insertKeyed(40_000, 2_000);
      const { scheduled, started } = await scheduledPass();
      const report = `scaleOut ${JSON.stringify(scheduled.scaleOut)}; started passes: ${started.map((r) => `claimed ${r.claimed}`).join(', ')}`;
      assert.ok(scheduled.scaleOut.started > 0, report);
      assert.equal(started.length, scheduled.scaleOut.started, report);
      for (const result of started) assert.ok(result.claimed > 0, report);
    });
  });
}
