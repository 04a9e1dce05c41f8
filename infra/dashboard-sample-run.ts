/**
 * The metric values behind the dashboard picture: a short local run of QueueBox through the real
 * handlers, recorded round by round. Each round stands for one minute of the deployed schedule:
 * the demo application enqueues orders and customer notifications, a payment provider posts
 * signed webhooks (with duplicates and forgeries), a job feed fills a pull source, then the outbox
 * poller, the inbox relay and a pull worker each run one invocation (reclaim every fifth round).
 * Deliveries go through the real SDK clients to the SQS emulator and the local EventBridge
 * endpoint, which refuses some entries in a few rounds (throttling, one malformed entry), so the
 * retry and dead-letter series have data. Every EMF line the handlers write is kept with its round;
 * the Lambda series (duration, errors) are measured around each handler call.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Context } from 'aws-lambda';
import { parseConfig } from '../lib/config/load-config.ts';
import type { QueueBoxConfig } from '../lib/config/schema.ts';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import { startLocalEventBridge } from '../lib/local/local-eventbridge.ts';
import { createLogger } from '../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../lib/observability/metrics.ts';
import { enqueue } from '../lib/outbox/enqueue.ts';
import { createPullWorker } from '../lib/pull/pull-worker.ts';
import { setContainer } from '../lib/runtime/container.ts';
import { createInvocationContext } from '../lib/runtime/invocation-context.ts';
import { DemoWebhooks } from '../lib/local/local-demo-webhooks.ts';
import { EMULATOR_REGION, startLocalSqsEmulator } from '../lib/local/local-sqs-emulator.ts';

/** What one round of the run produced. */
export interface SampleRound {
  /** EMF lines written during the round. */
  emf: string[];
  /** Per function name: duration of its invocation (ms) and whether it failed. */
  lambda: Record<string, { durationMs: number; error: boolean }>;
}

export interface SampleRunOptions {
  /** PostgreSQL server; the run uses a schema of its own and drops it at the end. */
  databaseUrl: string;
  rounds?: number;
  /** Progress lines. */
  out?: (line: string) => void;
}

const WEBHOOK_SECRET = 'whsec_dashboard_sample';

/** The configuration of the run; the dashboard is rendered from the same one. */
export function sampleConfig(databaseUrl: string, schema: string, endpoints: { sqs: string; fifoQueueUrl: string; standardQueueUrl: string; eventBridge: string }): QueueBoxConfig {
  return parseConfig({
    database: { url: databaseUrl, schema },
    destinations: {
      orders: { type: 'sqs', queueUrl: endpoints.fifoQueueUrl, endpoint: endpoints.sqs, region: EMULATOR_REGION },
      events: { type: 'sqs', queueUrl: endpoints.standardQueueUrl, endpoint: endpoints.sqs, region: EMULATOR_REGION },
      notifications: { type: 'eventbridge', eventBusName: 'app-bus', source: 'shop', endpoint: endpoints.eventBridge, region: EMULATOR_REGION },
    },
    outbox: {
      routes: [
        { topicPattern: 'orders.**', destination: 'orders' },
        { topicPattern: 'payments.**', destination: 'orders' },
        { topicPattern: 'customer.**', destination: 'notifications' },
        { topicPattern: '**', destination: 'events' },
      ],
      pollIntervalMs: 50,
      retryBaseDelayMs: 200,
      maxAttempts: 3,
    },
    inbox: {
      relay: { pollIntervalMs: 50 },
      sources: {
        payments: { type: 'http', path: '/payments', auth: { type: 'hmac', secretEnv: 'SAMPLE_WEBHOOK_SECRET' }, idempotencyKeyPath: '$.id', eventTypePath: '$.type', aggregateIdPath: '$.orderId' },
        // Filled by the job feed directly; its route is never called.
        jobs: { type: 'http', path: '/jobs', consumption: 'pull', auth: { type: 'none' } },
      },
    },
    lambda: { deadlineMarginMs: 1000 },
    observability: { logLevel: 'SILENT' },
  });
}

/** Runs the workload; returns its configuration and its rounds. */
export async function runSample(options: SampleRunOptions): Promise<{ config: QueueBoxConfig; rounds: SampleRound[] }> {
  const out = options.out ?? (() => {});
  const rounds = options.rounds ?? 30;
  const schema = `qb_dashboard_${randomUUID().slice(0, 8)}`;
  const sqs = await startLocalSqsEmulator();
  const bus = await startLocalEventBridge({ buses: ['app-bus'] });
  const env: Record<string, string | undefined> = { ...process.env, SAMPLE_WEBHOOK_SECRET: WEBHOOK_SECRET, AWS_ACCESS_KEY_ID: 'local', AWS_SECRET_ACCESS_KEY: 'local' };
  Object.assign(process.env, { SAMPLE_WEBHOOK_SECRET: WEBHOOK_SECRET, AWS_ACCESS_KEY_ID: env.AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY: env.AWS_SECRET_ACCESS_KEY });
  const config = sampleConfig(options.databaseUrl, schema, { sqs: sqs.endpoint, fifoQueueUrl: sqs.fifoQueueUrl, standardQueueUrl: sqs.standardQueueUrl, eventBridge: bus.endpoint });
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: 2 });
  const driver = new PostgresDriver({ config, url: options.databaseUrl });
  let current: SampleRound = { emf: [], lambda: {} };
  const write = (line: string) => current.emf.push(line);
  try {
    await driver.migrate();
    setContainer({ config, driver, logger: createLogger({ serviceName: config.observability.serviceName, logLevel: 'SILENT' }), env, writeMetrics: write });
    const [{ handler: poller }, { handler: relay }, { handler: reclaim }] = await Promise.all([
      import('../functions/outbox-poller.ts'),
      import('../functions/inbox-relay.ts'),
      import('../functions/reclaim.ts'),
    ]);
    const webhooks = new DemoWebhooks({ path: '/inbox/payments', source: config.inbox.sources.payments!, secret: WEBHOOK_SECRET, out });
    const pullMetrics = new QueueBoxMetrics({ namespace: config.observability.namespace, serviceName: config.observability.serviceName, write });
    const worker = createPullWorker({
      driver,
      config,
      source: 'jobs',
      metrics: pullMetrics,
      retry: { maxAttempts: 2, baseDelayMs: 100, maxDelayMs: 100 },
      logger: { warn: () => {}, error: () => {} },
      handler: async (message) => {
        if ((message.payload as { fail?: boolean }).fail === true) throw new Error('job failed');
      },
    });
    const timed = async (name: string, run: (context: Context) => Promise<unknown>) => {
      const started = performance.now();
      let error = false;
      await run(createInvocationContext({ functionName: name, timeoutMs: 3200 })).catch(() => (error = true));
      current.lambda[name] = { durationMs: performance.now() - started, error };
    };

    const result: SampleRound[] = [];
    let n = 0;
    for (let round = 0; round < rounds; round++) {
      current = { emf: [], lambda: {} };
      // Load follows a slow wave with a burst in the middle of the run.
      const orders = Math.round(30 + 20 * Math.sin(round / 3) + (round >= 14 && round < 18 ? 60 : 0));
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        for (let i = 0; i < orders; i++, n++) {
          const topic = i % 3 === 2 ? 'customer.notified' : 'orders.created';
          await enqueue(client, { topic, key: topic === 'customer.notified' ? null : `customer-${n % 40}`, payload: { n } }, { schema });
        }
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      for (let i = 0; i < Math.round(orders / 4); i++) {
        await webhooks.deliverFor({ n: n - i, orderId: `order-${n - i}`, customer: `customer-${(n - i) % 40}`, amountCents: 1000 + i });
      }
      for (let i = 0; i < 8; i++) {
        await driver.inboxInsert({ source: 'jobs', idempotencyKey: `job-${round}-${i}`, payload: { fail: round % 6 === 3 && i === 0 }, consumption: 'pull' });
      }
      // EventBridge throttles part of the traffic for a few rounds, and refuses one malformed entry.
      bus.failEntries(
        round >= 8 && round < 11
          ? (_entry, index) => (index % 3 === 0 ? { ErrorCode: 'ThrottlingException', ErrorMessage: 'Rate exceeded' } : undefined)
          : round === 22
            ? (_entry, index) => (index === 0 ? { ErrorCode: 'InvalidArgument', ErrorMessage: 'Detail is not valid for a rule' } : undefined)
            : undefined,
      );
      await Promise.all([
        timed('outboxPoller', (context) => poller({ source: 'aws.events' }, context)),
        timed('inboxRelay', (context) => relay({ source: 'aws.events' }, context)),
        worker.runOnce().then(() => pullMetrics.flush()),
        round % 5 === 4 ? timed('reclaim', (context) => reclaim({ source: 'aws.events' }, context)) : Promise.resolve(),
      ]);
      result.push(current);
      out(`round ${round + 1}/${rounds}: ${orders} orders, ${current.emf.length} EMF lines`);
    }
    return { config, rounds: result };
  } finally {
    setContainer(undefined);
    await driver.close().catch(() => {});
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
    await pool.end();
    await sqs.stop();
    await bus.stop();
  }
}
