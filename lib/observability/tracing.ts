/**
 * Optional AWS X-Ray tracing through Powertools Tracer (`observability.tracing`, off by default).
 *
 * When on, the outbox poller's invocation runs in a `## outboxPoller` subsegment (annotated with
 * `ColdStart` and `Service`), each destination call in a `### <type> <name>` subsegment with the
 * destination, its type, the entry count and the per-entry outcomes, and the SDK clients are
 * captured so the `SendMessageBatch` / `PutEvents` request itself appears below it. The tracer
 * module is loaded only when tracing is on, so a function without tracing never evaluates it.
 * Outside Lambda (no `AWS_EXECUTION_ENV`) or with `POWERTOOLS_TRACE_ENABLED=false`, Powertools
 * disables it and every function here is a pass-through.
 */
import type { Tracer } from '@aws-lambda-powertools/tracer';
import type { QueueBoxConfig } from '../config/schema.ts';
import type { CallProgress, Destination, EntryOutcome, OutboundMessage } from '../destinations/destination.ts';

export type { Tracer };

type Segment = NonNullable<ReturnType<Tracer['getSegment']>>;

/** The container's tracer, or `undefined` when `observability.tracing` is off. */
export async function createTracer(config: Pick<QueueBoxConfig, 'observability'>): Promise<Tracer | undefined> {
  if (!config.observability.tracing) return undefined;
  const { Tracer: PowertoolsTracer } = await import('@aws-lambda-powertools/tracer');
  // Outgoing HTTP in general is not QueueBox's to trace; the SDK clients are captured one by one.
  return new PowertoolsTracer({ serviceName: config.observability.serviceName, captureHTTPsRequests: false });
}

/** Runs `work` as the `## <name>` subsegment of the invocation; a pass-through without an enabled tracer. */
export async function traceInvocation<T>(tracer: Tracer | undefined, name: string, work: () => Promise<T>): Promise<T> {
  const parent = tracer?.isTracingEnabled() ? tracer.getSegment() : undefined;
  if (tracer === undefined || parent === undefined) return work();
  const segment = parent.addNewSubsegment(`## ${name}`);
  tracer.setSegment(segment);
  tracer.annotateColdStart();
  tracer.addServiceNameAnnotation();
  try {
    const result = await work();
    tracer.addResponseAsMetadata(result, name);
    return result;
  } catch (error) {
    tracer.addErrorAsMetadata(error as Error);
    throw error;
  } finally {
    segment.close();
    tracer.setSegment(parent);
  }
}

/** Captures an AWS SDK v3 client's calls as subsegments (the client itself when tracing is off). */
export function traceClient<C>(tracer: Tracer | undefined, client: C): C {
  return tracer?.isTracingEnabled() ? tracer.captureAWSv3Client(client) : client;
}

/** The destination, with each `publishBatch` call in a `### <type> <name>` subsegment. */
export function tracedDestination(destination: Destination, tracer: Tracer): Destination {
  return {
    name: destination.name,
    type: destination.type,
    maxBatchSize: destination.maxBatchSize,
    ...(destination.target !== undefined ? { target: destination.target } : {}),
    async publishBatch(messages: OutboundMessage[], signal?: AbortSignal, progress?: CallProgress): Promise<EntryOutcome[]> {
      const parent: Segment | undefined = tracer.isTracingEnabled() ? tracer.getSegment() : undefined;
      if (parent === undefined) return destination.publishBatch(messages, signal, progress);
      const segment = parent.addNewSubsegment(`### ${destination.type} ${destination.name}`);
      segment.addAnnotation('destination', destination.name);
      segment.addAnnotation('destination_type', destination.type);
      segment.addAnnotation('entries', messages.length);
      try {
        const outcomes = await destination.publishBatch(messages, signal, progress);
        const counts: Record<string, number> = {};
        for (const outcome of outcomes) counts[outcome.status] = (counts[outcome.status] ?? 0) + 1;
        segment.addMetadata('outcomes', counts);
        if ((counts.retryable ?? 0) + (counts.permanent ?? 0) > 0) segment.addErrorFlag();
        return outcomes;
      } catch (error) {
        segment.addError(error as Error);
        throw error;
      } finally {
        segment.close();
      }
    },
  };
}
