/**
 * Builds every configured destination once per container.
 *
 * SDK clients are created here and reused by every call; destinations with the same service,
 * region and endpoint share one client (and so one connection pool). Region defaults to the
 * SDK's own resolution (`AWS_REGION` in Lambda), credentials to the default provider chain.
 * The clients get no request timeout: each destination bounds its own calls
 * (`destinations.<name>.callTimeoutMs`, an abort signal per call), since destinations with
 * different timeouts may share a client.
 */
import { EventBridgeClient, type EventBridgeClientConfig } from '@aws-sdk/client-eventbridge';
import { SQSClient, type SQSClientConfig } from '@aws-sdk/client-sqs';
import type { EventBridgeDestinationConfig, QueueBoxConfig, SqsDestinationConfig } from '../config/schema.ts';
import type { Destination } from './destination.ts';
import { EventBridgeDestination } from './eventbridge-destination.ts';
import { SqsDestination } from './sqs-destination.ts';

/** Client settings applied over every destination's own (local runner, tests). */
export interface ClientOverrides {
  /** Replaces every destination's endpoint (e.g. a local emulator such as fauxqs). */
  endpoint?: string;
  /** Replaces every destination's region. */
  region?: string;
  /** Static credentials instead of the default provider chain. */
  credentials?: SQSClientConfig['credentials'] & EventBridgeClientConfig['credentials'];
  /** SDK attempts per call (SDK default 3). */
  maxAttempts?: number;
}

export interface CreateDestinationsOptions {
  clientOverrides?: ClientOverrides;
  /** Builds the SQS client of a destination instead of the default (tests). */
  sqsClient?: (config: SqsDestinationConfig) => SQSClient;
  /** Builds the EventBridge client of a destination instead of the default (tests). */
  eventBridgeClient?: (config: EventBridgeDestinationConfig) => EventBridgeClient;
  /** Applied to every client built here (X-Ray capture when tracing is on). */
  wrapClient?: <C extends SQSClient | EventBridgeClient>(client: C) => C;
}

/** Destinations by config name; every name of `config.destinations` is present. */
export type Destinations = ReadonlyMap<string, Destination>;

/** Builds all destinations of `config.destinations`; call once per container. */
export function createDestinations(config: Pick<QueueBoxConfig, 'destinations'>, options: CreateDestinationsOptions = {}): Destinations {
  const overrides = options.clientOverrides ?? {};
  const clients = new Map<string, SQSClient | EventBridgeClient>();
  const clientSettings = (destination: { region?: string | undefined; endpoint?: string | undefined }) => {
    const region = overrides.region ?? destination.region;
    const endpoint = overrides.endpoint ?? destination.endpoint;
    return {
      ...(region !== undefined ? { region } : {}),
      ...(endpoint !== undefined ? { endpoint } : {}),
      ...(overrides.credentials !== undefined ? { credentials: overrides.credentials } : {}),
      ...(overrides.maxAttempts !== undefined ? { maxAttempts: overrides.maxAttempts } : {}),
    };
  };
  const shared = <C extends SQSClient | EventBridgeClient>(service: string, settings: { region?: string; endpoint?: string }, build: () => C): C => {
    const cacheKey = `${service} ${settings.region ?? ''} ${settings.endpoint ?? ''}`;
    let client = clients.get(cacheKey);
    if (!client) {
      client = options.wrapClient ? options.wrapClient(build()) : build();
      clients.set(cacheKey, client);
    }
    return client as C;
  };

  const destinations = new Map<string, Destination>();
  for (const [name, destination] of Object.entries(config.destinations)) {
    if (destination.type === 'sqs') {
      const settings = clientSettings(destination);
      const client = options.sqsClient?.(destination) ?? shared('sqs', settings, () => new SQSClient(settings));
      destinations.set(name, new SqsDestination({ name, queueUrl: destination.queueUrl, callTimeoutMs: destination.callTimeoutMs, client }));
    } else {
      const settings = clientSettings(destination);
      const client = options.eventBridgeClient?.(destination) ?? shared('eventbridge', settings, () => new EventBridgeClient(settings));
      destinations.set(name, new EventBridgeDestination({ name, eventBusName: destination.eventBusName, source: destination.source, callTimeoutMs: destination.callTimeoutMs, maxRequestBytes: destination.maxRequestBytes, client }));
    }
  }
  return destinations;
}
