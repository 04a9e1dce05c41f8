/**
 * Lambda entry point of the scheduled inbox push relay: one pass, bounded by the invocation
 * deadline (`getRemainingTimeInMillis() − lambda.deadlineMarginMs`); records that it finished (the
 * heartbeat: `pass-heartbeat.ts`) and returns the pass summary. With
 * `inbox.relay.scaleOut.maxConcurrentPasses` above 1, a pass that sees more due rows than it can
 * forward before its deadline starts more passes of this function (`lib/runtime/scale-out.ts`).
 *
 * The pass's counts are written before the steps after it (heartbeat stamp, scale-out release),
 * which are bounded by the deadline or a short slice past it (`closingBudgetMs`), so the handler
 * returns before the invocation ends, with its metrics written, whatever the database does; the
 * scale-out start is bounded by the deadline.
 */
import type { Context } from 'aws-lambda';
import { throwingRedacted } from '../lib/claims/redact.ts';
import { withStatementBudget } from '../lib/db/statement-budget.ts';
import { runRelayPass, type RelaySummary } from '../lib/inbox/relay-pass.ts';
import { getContainer, passMetrics } from '../lib/runtime/container.ts';
import { closingBudgetMs, createDeadline } from '../lib/runtime/deadline.ts';
import { hasTimeToClaim, recordPassFinished } from '../lib/runtime/pass-heartbeat.ts';
import { joinScaleOut, type ScaleOutReport } from '../lib/runtime/scale-out.ts';
import { lambdaInvoker, selfInvokeTarget, type InvokeAsync } from '../lib/runtime/self-invoke.ts';

export interface InboxRelayOptions {
  /** Starts passes of this function (scale-out); default an asynchronous invoke through the AWS SDK (tests: a local endpoint). */
  invoke?: InvokeAsync;
}

/** What an invocation returns: its pass's summary, and what scale-out did. */
export interface InboxRelayResult extends RelaySummary {
  scaleOut: ScaleOutReport;
}

/** The summary of an invocation that ran no pass (a duplicate scale-out start event). */
const NO_PASS: RelaySummary = { claimed: 0, forwarded: 0, retried: 0, dead: 0, claimsLost: 0, released: 0, reclaimed: 0, abandoned: 0, durationMs: 0 };

/** Builds a relay handler; the module's `handler` is the one deployed. */
export function createInboxRelay(options: InboxRelayOptions = {}): (event: unknown, context: Context) => Promise<InboxRelayResult> {
  const invoke = options.invoke ?? lambdaInvoker();
  // What it throws leaves it redacted: the runtime logs a thrown error's message and stack.
  return throwingRedacted(async function inboxRelay(event, context) {
    const container = await getContainer(context);
    container.logger.addContext(context);
    const metrics = passMetrics(container);
    const deadline = createDeadline(context, container.config.lambda.deadlineMarginMs);
    // An invocation too short for its margin claims nothing and records no heartbeat (its alarm fires).
    const timeToClaim = hasTimeToClaim({ deadlineMs: deadline.remainingMs(), invocationMs: deadline.invocationRemainingMs(), marginMs: container.config.lambda.deadlineMarginMs, worker: 'inboxRelay', logger: container.logger });
    try {
      // A start event of scale-out takes its slot over (or finds it gone: no pass runs).
      const scaleOut = await withStatementBudget(deadline.remainingMs, () =>
        joinScaleOut({
          worker: 'inboxRelay',
          driver: container.driver,
          maxConcurrentPasses: container.config.inbox.relay.scaleOut.maxConcurrentPasses,
          functionName: selfInvokeTarget(context),
          event,
          deadline,
          metrics,
          logger: container.logger,
          invoke,
        }),
      );
      if (!scaleOut.runPass) return { ...NO_PASS, scaleOut: scaleOut.report };
      try {
        const summary = await runRelayPass({ ...container, metrics, deadline, mode: scaleOut.mode, scaleOut: scaleOut.hook });
        if (timeToClaim) await recordPassFinished({ driver: container.driver, metrics, logger: container.logger, worker: 'inboxRelay', remainingMs: closingBudgetMs(deadline) });
        container.logger.info('inbox relay pass', { ...summary, scaleOut: scaleOut.report });
        return { ...summary, scaleOut: scaleOut.report };
      } finally {
        // What the pass counted is written before the release, which may wait on the database
        // (a pass that threw did not reach its own flush).
        metrics.flush();
        await scaleOut.hook.passEnded();
        await withStatementBudget(closingBudgetMs(deadline), () => scaleOut.end());
      }
    } finally {
      metrics.flush();
    }
  });
}

/** The deployed handler (`functions/inbox-relay.handler`). */
export const handler = createInboxRelay();
