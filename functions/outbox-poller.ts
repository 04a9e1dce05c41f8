/**
 * Lambda entry point of the outbox poller, scheduled by `serverless.yml`.
 *
 * Thin by design: the container (config, driver, logger) and the destinations and router are
 * built once per container; each invocation computes its deadline, runs one pass, records that it
 * finished (the heartbeat: `pass-heartbeat.ts`), flushes its EMF metrics, logs the summary and
 * returns it. Nothing keeps running after it returns. With
 * `observability.tracing` on, the pass and each destination call are X-Ray subsegments.
 *
 * The pass's counts are written before the steps after it (heartbeat stamp, scale-out release),
 * which are bounded by the deadline or a short slice past it (`closingBudgetMs`), so the handler
 * returns before the invocation ends, with its metrics written, whatever the database does; the
 * scale-out start is bounded by the deadline.
 */
import type { Context } from 'aws-lambda';
import { redactError, throwingRedacted } from '../lib/claims/redact.ts';
import { createDestinations, type Destinations } from '../lib/destinations/create-destinations.ts';
import { OutboxPassError, runOutboxPass, type OutboxPassSummary } from '../lib/outbox/outbox-pass.ts';
import { traceClient, tracedDestination, traceInvocation } from '../lib/observability/tracing.ts';
import { createRouter, type Router } from '../lib/outbox/routes.ts';
import { getContainer, passMetrics, perContainer, type Container } from '../lib/runtime/container.ts';
import { closingBudgetMs, createDeadline } from '../lib/runtime/deadline.ts';
import { withStatementBudget } from '../lib/db/statement-budget.ts';
import { hasTimeToClaim, recordPassFinished } from '../lib/runtime/pass-heartbeat.ts';
import { joinScaleOut, type ScaleOutReport } from '../lib/runtime/scale-out.ts';
import { lambdaInvoker, selfInvokeTarget, type InvokeAsync } from '../lib/runtime/self-invoke.ts';

export interface OutboxPollerOptions {
  /** Builds the destinations of a container; default `createDestinations(config)` (tests inject their own). */
  buildDestinations?: (container: Container) => Destinations;
  /** Starts passes of this function (scale-out); default an asynchronous invoke through the AWS SDK (tests: a local endpoint). */
  invoke?: InvokeAsync;
}

/** What an invocation returns: its pass's summary, and what scale-out did. */
export interface OutboxPollerResult extends OutboxPassSummary {
  scaleOut: ScaleOutReport;
}

interface PollerDependencies {
  destinations: Destinations;
  router: Router;
}

/** Builds a poller handler; the module's `handler` is the one deployed. */
export function createOutboxPoller(options: OutboxPollerOptions = {}): (event: unknown, context: Context) => Promise<OutboxPollerResult> {
  const invoke = options.invoke ?? lambdaInvoker();
  const build = options.buildDestinations ?? ((container: Container) => createDestinations(container.config, { wrapClient: (client) => traceClient(container.tracer, client) }));
  const dependencies = perContainer((container): PollerDependencies => {
    const tracer = container.tracer;
    const built = build(container);
    const destinations = tracer ? new Map([...built].map(([name, d]) => [name, tracedDestination(d, tracer)])) : built;
    return { destinations, router: createRouter(container.config.outbox.routes, Object.fromEntries(destinations)) };
  });

  // What it throws leaves it redacted: the runtime logs a thrown error's message and stack.
  return throwingRedacted(async function outboxPoller(event, context) {
    const container = await getContainer(context);
    const { destinations, router } = dependencies(container);
    const metrics = passMetrics(container);
    const logger = container.logger;
    logger.addContext(context);
    const deadline = createDeadline(context, container.config.lambda.deadlineMarginMs);
    // An invocation too short for its margin claims nothing and records no heartbeat (its alarm fires).
    const timeToClaim = hasTimeToClaim({ deadlineMs: deadline.remainingMs(), invocationMs: deadline.invocationRemainingMs(), marginMs: container.config.lambda.deadlineMarginMs, worker: 'outboxPoller', logger: logger });
    try {
      // A start event of scale-out takes its slot over (or finds it gone: no pass runs).
      const scaleOut = await withStatementBudget(deadline.remainingMs, () =>
        joinScaleOut({
          worker: 'outboxPoller',
          driver: container.driver,
          maxConcurrentPasses: container.config.outbox.scaleOut.maxConcurrentPasses,
          functionName: selfInvokeTarget(context),
          event,
          deadline,
          metrics,
          logger,
          invoke,
        }),
      );
      if (!scaleOut.runPass) return { ...NO_PASS, scaleOut: scaleOut.report };
      try {
        const summary = await traceInvocation(container.tracer, 'outboxPoller', () => runOutboxPass({
          driver: container.driver,
          config: container.config,
          destinations,
          router,
          deadline,
          metrics,
          logger,
          mode: scaleOut.mode,
          scaleOut: scaleOut.hook,
        }));
        if (timeToClaim) await recordPassFinished({ driver: container.driver, metrics, logger, worker: 'outboxPoller', remainingMs: closingBudgetMs(deadline) });
        logger.info('outbox pass finished', { summary, scaleOut: scaleOut.report });
        return { ...summary, scaleOut: scaleOut.report };
      } finally {
        // What the pass counted is written before the release, which may wait on the database
        // (a pass that threw did not reach its own flush).
        metrics.flush();
        await scaleOut.hook.passEnded();
        await withStatementBudget(closingBudgetMs(deadline), () => scaleOut.end());
      }
    } catch (error) {
      if (error instanceof OutboxPassError) logger.error('outbox pass failed', { summary: error.summary, error: redactError(error.cause) });
      throw error;
    } finally {
      metrics.flush();
    }
  });
}

/** The summary of an invocation that ran no pass (a duplicate scale-out start event). */
const NO_PASS: OutboxPassSummary = { claimed: 0, sent: 0, retried: 0, dead: 0, claimsLost: 0, reclaimed: 0, batches: 0, publishCalls: 0, released: 0, reclaimRan: false, abandoned: 0, durationMs: 0, stoppedBecause: 'stopped' };

/** The deployed handler (`functions/outbox-poller.handler`). */
export const handler = createOutboxPoller();
