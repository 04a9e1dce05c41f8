/**
 * Replay function, invoked by hand: the event is a replay request
 * (`{"ids": [...], "topics": [...], "destination": "...", "createdFrom": "...", "createdTo": "...", "states": ["dead"]}`).
 * At least one filter is required; only `sent`/`dead` rows move. Returns `{ moved }`.
 */
import type { Context } from 'aws-lambda';
import { UsageError } from '../lib/errors.ts';
import { replayOutbox, type ReplayRequest } from '../lib/operations/replay.ts';
import { getContainer } from '../lib/runtime/container.ts';

export async function handler(event: unknown, context: Context): Promise<{ moved: number }> {
  const container = await getContainer();
  container.logger.addContext(context);
  if (typeof event !== 'object' || event === null || Array.isArray(event)) {
    throw new UsageError('replay: the event must be a JSON object of filters (ids, topics, destination, createdFrom, createdTo, states)');
  }
  const result = await replayOutbox(container.driver, container.config, event as ReplayRequest);
  container.logger.info('replay finished', { ...result, filter: event });
  return result;
}
