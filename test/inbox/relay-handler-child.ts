/**
 * Runs the deployed relay handler (`functions/inbox-relay.ts`) in a process of its own, as the
 * scheduled relay Lambda would: invocation after invocation (`RELAY_INVOCATION_MS` each) until no
 * push row is `pending` or `processing`, or `RELAY_MAX_INVOCATIONS` ran. Prints each invocation's
 * summary as a JSON line. Started by `relay-large-bodies-memory.test.ts` with a small
 * `--max-old-space-size`; reads `DATABASE_URL`, `RELAY_SCHEMA` and `RELAY_CONFIG` (the config
 * input, JSON, without `database`).
 */
import { createInboxRelay } from '../../functions/inbox-relay.ts';
import { parseConfig } from '../../lib/config/load-config.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createInvocationContext } from '../../lib/runtime/invocation-context.ts';

const url = process.env.DATABASE_URL!;
const schema = process.env.RELAY_SCHEMA!;
const config = parseConfig({ ...(JSON.parse(process.env.RELAY_CONFIG!) as object), database: { url, schema } });
const driver = new PostgresDriver({ config, url });
setContainer({ config, driver, logger: createLogger({ serviceName: 'queuebox', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
const handler = createInboxRelay({
  invoke: () => Promise.reject(new Error('no scale-out in this test')),
});
const invocationMs = Number(process.env.RELAY_INVOCATION_MS ?? 10_000);
const maxInvocations = Number(process.env.RELAY_MAX_INVOCATIONS ?? 10);
try {
  for (let i = 0; i < maxInvocations; i++) {
    const summary = await handler({ source: 'aws.events' }, createInvocationContext({ functionName: 'test-queueboxInboxRelay', timeoutMs: invocationMs }));
    console.log(JSON.stringify(summary));
    const { counts } = await driver.inboxStats();
    if ((counts.pending ?? 0) === 0 && (counts.processing ?? 0) === 0) break;
  }
} finally {
  setContainer(undefined);
  await driver.close();
}
