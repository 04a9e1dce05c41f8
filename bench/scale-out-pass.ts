/**
 * One outbox pass of `bench/scale-out.ts`, in a process of its own (as one Lambda invocation has
 * its own): connects, prints `ready`, waits for `go` on standard input (so every pass of a run
 * starts together, however long the processes took to start), runs the
 * real pass (`runOutboxPass`, `deadline` mode: claims until its deadline) for `--seconds` against
 * `--schema`, publishing to an in-process destination that answers `sent` after `--publish-ms`
 * per call (a stand-in for the SQS round trip), prints its summary as one JSON line, and keeps its
 * connections until standard input ends (the parent reads the server's CPU first).
 */
import { parseArgs } from 'node:util';
import { parseConfig } from '../lib/config/load-config.ts';
import { PostgresDriver } from '../lib/db/postgres/postgres-driver.ts';
import type { Destination, EntryOutcome, OutboundMessage } from '../lib/destinations/destination.ts';
import { QueueBoxMetrics } from '../lib/observability/metrics.ts';
import { runOutboxPass } from '../lib/outbox/outbox-pass.ts';
import type { PassLogger } from '../lib/outbox/pass-context.ts';
import { createRouter } from '../lib/outbox/routes.ts';
import { createDeadline } from '../lib/runtime/deadline.ts';

const silent: PassLogger = { debug() {}, info() {}, warn() {}, error() {} };

/** Answers every entry `sent` after `delayMs` (no network). */
class DelayedDestination implements Destination {
  readonly maxBatchSize = 10;
  readonly type = 'sqs' as const;
  constructor(
    readonly name: string,
    private readonly delayMs: number,
  ) {}
  async publishBatch(messages: OutboundMessage[]): Promise<EntryOutcome[]> {
    if (this.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.delayMs));
    return messages.map((m) => ({ id: m.id, status: 'sent' }));
  }
}

const { values } = parseArgs({ options: { url: { type: 'string' }, schema: { type: 'string' }, seconds: { type: 'string' }, 'publish-ms': { type: 'string', default: '0' } } });
const url = values.url!;
const config = parseConfig({
  database: { url, schema: values.schema!, poolMax: 3 },
  destinations: { bench: { type: 'sqs', queueUrl: 'http://127.0.0.1:1/000000000000/bench', region: 'us-east-1' } },
  outbox: { routes: [{ topicPattern: '**', destination: 'bench' }] },
});
const driver = new PostgresDriver({ config, url });
const destination = new DelayedDestination('bench', Number(values['publish-ms']));
try {
  await driver.clockNow(); // connected before the start
  process.stdout.write('ready\n');
  await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
  process.stdin.pause();
  const endAt = Date.now() + Number(values.seconds) * 1000;
  const summary = await runOutboxPass({
    driver,
    config,
    destinations: new Map([['bench', destination]]),
    router: createRouter(config.outbox.routes, { bench: destination }),
    deadline: createDeadline({ getRemainingTimeInMillis: () => endAt - Date.now() }, 0),
    metrics: new QueueBoxMetrics({ namespace: 'bench', serviceName: 'bench', write: () => {} }),
    logger: silent,
  });
  process.stdout.write(`${JSON.stringify({ sent: summary.sent, claimed: summary.claimed, batches: summary.batches, durationMs: summary.durationMs })}\n`);
  // The connections stay open until the parent has read the server's CPU (their backends with them).
  await new Promise<void>((resolve) => {
    process.stdin.resume();
    process.stdin.on('data', () => {});
    process.stdin.once('end', () => resolve());
  });
} finally {
  await driver.close();
}
