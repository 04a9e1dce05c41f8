/**
 * Replay as an operation (spec §7): move `sent`/`dead` outbox rows back to `pending` by filter.
 *
 * At least one filter is required (ids, topics, destination, created range); a request for any
 * other state is refused. A destination is resolved to the topic patterns of the routes that
 * name it. The driver resets attempt, schedule, error and claim columns, keeps `id` and
 * `sequence`, and increments `replay_count` (the FIFO destination derives a fresh deduplication
 * id from it).
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import type { Driver, ReplayFilter } from '../db/driver.ts';
import { UsageError } from '../errors.ts';

/** A replay request as an operator writes it (CLI flags or the replay function's event). */
export interface ReplayRequest {
  ids?: string[];
  topics?: string[];
  /** Name of an entry in `destinations`. */
  destination?: string;
  /** ISO-8601 time or Date; inclusive. */
  createdFrom?: string | Date;
  /** ISO-8601 time or Date; exclusive. */
  createdTo?: string | Date;
  /** States to move; default `sent` and `dead`. */
  states?: string[];
}

const REPLAYABLE = new Set(['sent', 'dead']);

/** Validates a request and turns it into a driver filter; throws `UsageError` with the reason. */
export function resolveReplayFilter(config: Pick<QueueBoxConfig, 'outbox' | 'destinations'>, request: ReplayRequest): ReplayFilter {
  const filter: ReplayFilter = {};
  if (request.ids?.length) filter.ids = [...request.ids];
  if (request.topics?.length) filter.topics = [...request.topics];
  if (request.destination !== undefined && request.destination !== '') {
    const name = request.destination;
    if (!(name in config.destinations)) {
      const known = Object.keys(config.destinations);
      throw new UsageError(`replay: destination "${name}" is not configured (known: ${known.length ? known.join(', ') : 'none'})`);
    }
    const patterns = config.outbox.routes.filter((r) => r.destination === name).map((r) => r.topicPattern);
    if (patterns.length === 0) throw new UsageError(`replay: no route in outbox.routes sends to destination "${name}"`);
    filter.topicPatterns = patterns;
  }
  if (request.createdFrom !== undefined) filter.createdFrom = toDate(request.createdFrom, 'createdFrom');
  if (request.createdTo !== undefined) filter.createdTo = toDate(request.createdTo, 'createdTo');
  if (!filter.ids && !filter.topics && !filter.topicPatterns && !filter.createdFrom && !filter.createdTo) {
    throw new UsageError('replay needs at least one filter: ids, topics, destination, createdFrom or createdTo');
  }
  if (request.states?.length) {
    const wrong = request.states.filter((s) => !REPLAYABLE.has(s));
    if (wrong.length > 0) throw new UsageError(`replay moves only sent or dead rows, not ${wrong.join(', ')}`);
    filter.states = request.states as Array<'sent' | 'dead'>;
  }
  return filter;
}

function toDate(value: string | Date, key: string): Date {
  const date = value instanceof Date ? value : new Date(value);
  if (Number.isNaN(date.getTime())) throw new UsageError(`replay: ${key} is not a valid time: ${String(value)}`);
  return date;
}

/** Replays matching rows; returns how many moved to `pending`. */
export async function replayOutbox(driver: Driver, config: Pick<QueueBoxConfig, 'outbox' | 'destinations'>, request: ReplayRequest): Promise<{ moved: number }> {
  const filter = resolveReplayFilter(config, request);
  return { moved: await driver.outboxReplay(filter) };
}
