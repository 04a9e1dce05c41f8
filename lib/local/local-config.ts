/**
 * The configuration of `queuebox local`: the loaded one with the run's database URL (and schema).
 * Without the demo (`--no-demo`, the default with a config file) that is all. With the demo, it is
 * completed by the demo wiring when the loaded config names no destinations:
 *
 * - destinations `orders` (the emulator's FIFO queue), `events` (its standard queue) and
 *   `notifications` (the local EventBridge's demo bus, source `queuebox.demo`);
 * - routes `orders.**` and `payments.**` → `orders`, `customer.**` → `notifications`, everything
 *   else → `events`;
 * - when it also names no inbox sources, the HTTP inbox source `payments` (`POST
 *   {inbox.basePath}/payments`, hmac-signed with the secret in `DEMO_PAYMENTS_SECRET_ENV`,
 *   idempotency key `$.id` (signed, unlike a header), event type `$.type`, aggregate `$.orderId`, pushed
 *   to the outbox by the relay as `payments.<type>`).
 */
import { parseConfig } from '../config/load-config.ts';
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
 * Builds the config of a local run from the loaded `base`; `schema` isolates runs (tests).
 * `emulator`: the demo's emulator, or undefined for a run without the demo (nothing added).
 */
export function localConfig(base: QueueBoxConfig, url: string, emulator: LocalSqsEmulator | undefined, schema: string | undefined): LocalConfig {
  const database = { ...base.database, url, urlEnv: undefined, ...(schema !== undefined ? { schema } : {}) };
  if (emulator === undefined) return { config: parseConfig({ ...base, database }), demoInbox: false };
  const demo = Object.keys(base.destinations).length === 0;
  const demoInbox = demo && Object.keys(base.inbox.sources).length === 0;
  const sources: Record<string, unknown> = demoInbox ? { [DEMO_INBOX_SOURCE]: DEMO_INBOX_SOURCE_CONFIG } : base.inbox.sources;
  const config = parseConfig({
    ...base,
    database,
    destinations: demo
      ? {
          orders: { type: 'sqs', queueUrl: emulator.fifoQueueUrl, endpoint: emulator.endpoint, region: EMULATOR_REGION },
          events: { type: 'sqs', queueUrl: emulator.standardQueueUrl, endpoint: emulator.endpoint, region: EMULATOR_REGION },
          notifications: { type: 'eventbridge', eventBusName: DEMO_EVENT_BUS, source: 'queuebox.demo', endpoint: emulator.eventBridgeEndpoint, region: EMULATOR_REGION },
        }
      : base.destinations,
    outbox: demo
      ? {
          ...base.outbox,
          routes: [
            { topicPattern: 'orders.**', destination: 'orders' },
            // Relayed payment webhooks are keyed by order: the FIFO queue keeps each order's events in order.
            { topicPattern: `${DEMO_INBOX_SOURCE}.**`, destination: 'orders' },
            { topicPattern: 'customer.**', destination: 'notifications' },
            { topicPattern: '**', destination: 'events' },
          ],
        }
      : base.outbox,
    inbox: { ...base.inbox, sources },
  });
  return { config, demoInbox };
}

/** The demo source's settings as parsed (defaults applied), for the sender that signs its webhooks. */
export function demoSource(config: QueueBoxConfig): SourceConfig | undefined {
  return config.inbox.sources[DEMO_INBOX_SOURCE];
}
