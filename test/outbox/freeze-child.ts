/**
 * A Lambda container, for the freeze-after-return test: one invocation of the real outbox poller
 * handler with a context that counts down, a destination that never answers in time, and — the
 * moment the handler's promise settles — `SIGSTOP` to itself, as Lambda freezes a container when
 * its handler returns. Prints one JSON line first: the summary and the backend pids of its pool.
 *
 * Environment: DATABASE_URL, FREEZE_SCHEMA, FREEZE_TIMEOUT_MS, FREEZE_CLAIM_TIMEOUT_MS.
 */
import { createOutboxPoller } from '../../functions/outbox-poller.ts';
import { parseConfig } from '../../lib/config/load-config.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';

const url = process.env.DATABASE_URL!;
const config = parseConfig({
  database: { url, schema: process.env.FREEZE_SCHEMA! },
  destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
  outbox: { routes: [{ topicPattern: '**', destination: 'main' }], claimTimeoutMs: Number(process.env.FREEZE_CLAIM_TIMEOUT_MS), pollIntervalMs: 20, shutdownTimeoutMs: 100 },
  lambda: { deadlineMarginMs: 2500 },
});
const driver = new PostgresDriver({ config, url });
const pids: number[] = [];
driver.pool.on('connect', (client) => pids.push((client as unknown as { processID: number }).processID));
setContainer({ config, driver, logger: createLogger({ serviceName: 'queuebox', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });

// A slow destination: the publish is still running at the deadline and is abandoned.
const destination = new RecordingDestination({ delayMs: 60_000 });
const handler = createOutboxPoller({ buildDestinations: () => new Map([['main', destination]]) });
const context = createInvocationContext({ timeoutMs: Number(process.env.FREEZE_TIMEOUT_MS) });

process.stdout.write(`${JSON.stringify({ started: true })}\n`);
void handler({ source: 'aws.events' }, context).then(
  (summary) => freeze({ summary }),
  (error: unknown) => freeze({ error: String(error) }),
);

/** Reports, then stops this process at once: nothing else of the invocation runs after it. */
function freeze(result: Record<string, unknown>): void {
  // Standard output to a pipe is written synchronously on Linux: the line is out before the stop.
  process.stdout.write(`${JSON.stringify({ ...result, pids })}\n`);
  process.kill(process.pid, 'SIGSTOP');
}
