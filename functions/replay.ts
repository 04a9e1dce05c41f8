/**
 * Replay function, invoked by hand: the event is a replay request
 * (`{"ids": [...], "topics": [...], "destination": "...", "createdFrom": "...", "createdTo": "...", "lastErrorPrefix": "...", "states": ["dead"]}`;
 * dead inbox rows: `{"table": "inbox", "sources": [...], "consumption": "push" | "pull", ...}`)
 * plus `"dryRun": true` (count and sample, nothing moves) or `"yes": true` (confirm a replay of
 * more than 100 rows). Unknown keys and wrong types are refused naming the key; at least one
 * filter is required; states default to `dead`. Returns `{ moved }` or the preview. A replay the
 * invocation's deadline cancelled fails saying so and what moved (`replayCutAtDeadline`).
 */
import type { Context } from 'aws-lambda';
import { throwingRedacted } from '../lib/claims/redact.ts';
import { withStatementBudget } from '../lib/db/statement-budget.ts';
import { operationBudgetMs } from '../lib/runtime/deadline.ts';
import { cutAtDeadline, replayCutAtDeadline } from '../lib/operations/deadline-cut.ts';
import { parseReplayCommand, runReplayCommand } from '../lib/operations/replay.ts';
import { getContainer } from '../lib/runtime/container.ts';

/** The deployed handler; what it throws leaves it redacted (`throwingRedacted`): the runtime logs a thrown error's message and stack. */
export const handler = throwingRedacted(async function replay(event: unknown, context: Context): Promise<Awaited<ReturnType<typeof runReplayCommand>>> {
  const container = await getContainer(context);
  container.logger.addContext(context);
  const command = parseReplayCommand(event);
  // Bounded by the deadline: a replay still running then is cancelled (and rolled back) by the
  // database rather than left running after the invocation.
  const marginMs = container.config.lambda.deadlineMarginMs;
  const budget = operationBudgetMs(context, marginMs);
  const hadMs = budget();
  const result = await withStatementBudget(budget, () => runReplayCommand(container.driver, container.config, command)).catch((error: unknown) => {
    throw cutAtDeadline(error, budget()) ? replayCutAtDeadline(error, { dialect: container.driver.dialect, hadMs, marginMs, dryRun: command.dryRun, yes: command.yes }) : error;
  });
  container.logger.info(command.dryRun ? 'replay preview' : 'replay finished', { ...('moved' in result ? result : { count: result.count }), filter: command.request });
  return result;
});
