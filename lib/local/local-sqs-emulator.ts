/**
 * The in-process AWS emulators of `queuebox local`: SQS (fauxqs on a free port) with the demo
 * queues — a FIFO queue for orders and a standard queue for everything else — and a local
 * EventBridge endpoint with the demo bus for customer notifications.
 */
import type { FauxqsServer } from 'fauxqs';
import { importOptional } from '../optional-package.ts';
import { startLocalEventBridge } from './local-eventbridge.ts';

/** Demo queue names. */
export const DEMO_FIFO_QUEUE = 'queuebox-demo.fifo';
export const DEMO_STANDARD_QUEUE = 'queuebox-demo-events';
/** Demo EventBridge bus name. */
export const DEMO_EVENT_BUS = 'queuebox-demo-bus';
/** The emulator's region (any name works; the SDK needs one). */
export const EMULATOR_REGION = 'us-east-1';

export interface LocalSqsEmulator {
  endpoint: string;
  fifoQueueUrl: string;
  standardQueueUrl: string;
  /** Endpoint of the local EventBridge (`PutEvents`), which has the bus `DEMO_EVENT_BUS`. */
  eventBridgeEndpoint: string;
  /** Messages held by each demo queue (ready, in flight and delayed), and events the demo bus accepted. */
  counts(): Record<string, number>;
  stop(): Promise<void>;
}

/** Starts the emulator with the demo queues; `fauxqs` is an optional package, loaded here. */
export async function startLocalSqsEmulator(): Promise<LocalSqsEmulator> {
  const { startFauxqs } = await importOptional('fauxqs', 'The local SQS emulator (queuebox local)', () => import('fauxqs'));
  const server: FauxqsServer = await startFauxqs({ port: 0, logger: false });
  const fifo = server.createQueue(DEMO_FIFO_QUEUE, { attributes: { FifoQueue: 'true' } });
  const standard = server.createQueue(DEMO_STANDARD_QUEUE);
  const bus = await startLocalEventBridge({ buses: [DEMO_EVENT_BUS] });
  return {
    endpoint: `http://127.0.0.1:${server.port}`,
    fifoQueueUrl: fifo.queueUrl,
    standardQueueUrl: standard.queueUrl,
    eventBridgeEndpoint: bus.endpoint,
    counts: () => ({
      ...Object.fromEntries(
        [DEMO_FIFO_QUEUE, DEMO_STANDARD_QUEUE].map((name) => {
          const q = server.inspectQueue(name);
          return [name, q ? q.messages.ready.length + q.messages.inflight.length + q.messages.delayed.length : 0];
        }),
      ),
      [DEMO_EVENT_BUS]: bus.events(DEMO_EVENT_BUS).length,
    }),
    stop: async () => {
      await Promise.all([server.stop(), bus.stop()]);
    },
  };
}
