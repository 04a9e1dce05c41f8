/**
 * The configuration of `queuebox local`: the loaded one with the run's database URL (and schema).
 * Without the demo (`--no-demo`, the default with a config file) that is all. With the demo, the
 * loaded config must name no destinations (and so no routes): the demo's fake orders go to the
 * emulator only, never to destinations of yours (`refuseDemoWithOwnDestinations`). It is
 * completed by the demo wiring:
 *
 * - destinations `orders` (the emulator's FIFO queue), `events` (its standard queue) and
 *   `notifications` (the local EventBridge's demo bus, source `queuebox.demo`), each with the
 *   emulator's endpoint and region (the clients sign with `DEMO_CREDENTIALS`, never yours);
 * - routes `orders.**` and `payments.**` → `orders`, `customer.**` → `notifications`, everything
 *   else → `events`;
 * - when it also names no inbox sources, the HTTP inbox source `payments` (`POST
 *   {inbox.basePath}/payments`, hmac-signed with the secret in `DEMO_PAYMENTS_SECRET_ENV`,
 *   idempotency key `$.id` (signed, unlike a header), event type `$.type`, aggregate `$.orderId`, pushed
 *   to the outbox by the relay as `payments.<type>`).
 */
import { parseConfig } from '../config/load-config.ts';
import { UsageError } from '../errors.ts';
import type { QueueBoxConfig, SourceConfig } from '../config/schema.ts';
import { DEMO_EVENT_BUS, EMULATOR_REGION, type LocalSqsEmulator } from './local-sqs-emulator.ts';

/** Name (and path below `inbox.basePath`) of the demo HTTP inbox source. */
export const DEMO_INBOX_SOURCE = 'payments';
/** Environment variable holding the demo source's hmac secret; the run sets it when unset. */
export const DEMO_PAYMENTS_SECRET_ENV = 'DEMO_PAYMENTS_WEBHOOK_SECRET';
/** The demo secret used when `DEMO_PAYMENTS_SECRET_ENV` is unset (a local demo value, not a credential). */
export const DEMO_PAYMENTS_DEFAULT_SECRET = 'whsec_queuebox_local_demo';

/** The demo HTTP inbox source, as a config file would declare it. */
export const DEMO_INBOX_SOURCE_CONFIG = {
  type: 'http',
  path: `/${DEMO_INBOX_SOURCE}`,
  consumption: 'push',
  auth: { type: 'hmac', secretEnv: DEMO_PAYMENTS_SECRET_ENV },
  idempotencyKeyPath: '$.id',
  eventTypePath: '$.type',
  aggregateIdPath: '$.orderId',
} as const;

/** The local run's config and whether it carries the demo inbox source (then the demo delivers webhooks to it). */
export interface LocalConfig {
  config: QueueBoxConfig;
  demoInbox: boolean;
}

/**
 * The credentials the demo's destination clients sign with: stand-ins the emulator accepts, never
 * the environment's (a run with real keys in its environment must not send them anywhere).
 */
export const DEMO_CREDENTIALS = { accessKeyId: 'local', secretAccessKey: 'local' } as const;

/**
 * Refuses the demo with a configuration that names destinations (or routes) of its own: the demo
 * publishes fake orders, and they must never reach a destination of yours.
 */
export function refuseDemoWithOwnDestinations(base: QueueBoxConfig): void {
  const destinations = Object.keys(base.destinations);
  const routes = base.outbox.routes.map((r) => `${r.topicPattern} → ${r.destination}`);
  if (destinations.length === 0 && routes.length === 0) return;
  const named = [
    ...(destinations.length > 0 ? [`destinations ${destinations.join(', ')}`] : []),
    ...(routes.length > 0 ? [`routes ${routes.join(', ')}`] : []),
  ].join(' and ');
  throw new UsageError(
    `--demo publishes fake demo orders, and this configuration names ${named} of its own: the demo would publish to them. ` +
      'Drop --demo to run your functions against your destinations (--no-demo is the default with a config file), ' +
      'or run --demo with a configuration that names no destinations or routes: its demo publishes to the SQS emulator and the local demo bus only',
  );
}

/**
 * Builds the config of a local run from the loaded `base`; `schema` isolates runs (tests).
 * `emulator`: the demo's emulator, or undefined for a run without the demo (nothing added). With
 * the emulator, a `base` naming destinations or routes is refused (`refuseDemoWithOwnDestinations`).
 */
export function localConfig(base: QueueBoxConfig, url: string, emulator: LocalSqsEmulator | undefined, schema: string | undefined): LocalConfig {
  const database = { ...base.database, url, urlEnv: undefined, ...(schema !== undefined ? { schema } : {}) };
  if (emulator === undefined) return { config: parseConfig({ ...base, database }), demoInbox: false };
  refuseDemoWithOwnDestinations(base);
  const demoInbox = Object.keys(base.inbox.sources).length === 0;
  const sources: Record<string, unknown> = demoInbox ? { [DEMO_INBOX_SOURCE]: DEMO_INBOX_SOURCE_CONFIG } : base.inbox.sources;
  const config = parseConfig({
    ...base,
    database,
    destinations: {
      orders: { type: 'sqs', queueUrl: emulator.fifoQueueUrl, endpoint: emulator.endpoint, region: EMULATOR_REGION },
      events: { type: 'sqs', queueUrl: emulator.standardQueueUrl, endpoint: emulator.endpoint, region: EMULATOR_REGION },
      notifications: { type: 'eventbridge', eventBusName: DEMO_EVENT_BUS, source: 'queuebox.demo', endpoint: emulator.eventBridgeEndpoint, region: EMULATOR_REGION },
    },
    outbox: {
      ...base.outbox,
      routes: [
        { topicPattern: 'orders.**', destination: 'orders' },
        // Relayed payment webhooks are keyed by order: the FIFO queue keeps each order's events in order.
        { topicPattern: `${DEMO_INBOX_SOURCE}.**`, destination: 'orders' },
        { topicPattern: 'customer.**', destination: 'notifications' },
        { topicPattern: '**', destination: 'events' },
      ],
    },
    inbox: { ...base.inbox, sources },
  });
  return { config, demoInbox };
}

/** The demo source's settings as parsed (defaults applied), for the sender that signs its webhooks. */
export function demoSource(config: QueueBoxConfig): SourceConfig | undefined {
  return config.inbox.sources[DEMO_INBOX_SOURCE];
}
