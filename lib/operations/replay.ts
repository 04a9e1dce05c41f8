/**
 * Replay as an operation (spec §7): move `dead` (or, when asked, `sent`) outbox rows back to
 * `pending` by filter.
 *
 * Every operator input — the replay function's event, the CLI flags, a console's form — goes
 * through one strict schema (`parseReplayRequest`): an unknown key, a wrong type, an empty list,
 * a `null` or a non-time is refused with a `UsageError` naming the key, so a misspelled filter can
 * never widen a replay. At least one real filter is required; states default to `dead` only.
 * A destination is resolved to the topic patterns of the routes that name it. The driver resets
 * attempt, schedule, error and claim columns, keeps `id` and `sequence`, and increments
 * `replay_count` (the FIFO destination derives a fresh deduplication id from it).
 */
import { z } from 'zod';
import type { QueueBoxConfig } from '../config/schema.ts';
import type { Driver, ReplayFilter, ReplayPreviewRow } from '../db/driver.ts';
import { ReplayLimitError, UsageError } from '../errors.ts';
import { operatorTimeProblem } from './operator-time.ts';

export type { ReplayPreviewRow } from '../db/driver.ts';

/** Rows a replay may move without an explicit confirmation (`--yes` / `"yes": true`). */
export const REPLAY_CONFIRM_ABOVE = 100;

/** Rows shown by a preview unless the caller asks for another number. */
export const REPLAY_SAMPLE_SIZE = 10;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const time = z.union([
  z.date().refine((d) => !Number.isNaN(d.getTime()), 'is not a valid time'),
  z.string().superRefine((s, ctx) => {
    const problem = operatorTimeProblem(s);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  }),
]);
const nonEmptyList = (item: z.ZodString, what: string) => z.array(item).min(1, `must list at least one ${what}`);

/** The replay request fields: shared by the function event, the CLI and any other operator surface. */
const requestShape = {
  ids: nonEmptyList(z.string().regex(UUID, 'must be a row id (UUID)'), 'id'),
  topics: nonEmptyList(z.string().min(1, 'must not be empty').refine((t) => !t.includes('\0'), 'must not contain a NUL character'), 'topic'),
  destination: z.string().min(1, 'must not be empty'),
  createdFrom: time,
  createdTo: time,
  states: z.array(z.enum(['sent', 'dead'], { error: 'replay moves only sent or dead rows' })).min(1, 'must list at least one state'),
};

const requestSchema = z.strictObject({
  ids: requestShape.ids.optional(),
  topics: requestShape.topics.optional(),
  destination: requestShape.destination.optional(),
  createdFrom: requestShape.createdFrom.optional(),
  createdTo: requestShape.createdTo.optional(),
  states: requestShape.states.optional(),
});

const commandSchema = requestSchema.extend({ dryRun: z.boolean().optional(), yes: z.boolean().optional() }).strict();

/** A replay request; `parseReplayRequest` returns it with `states` filled (default `['dead']`) and times as `Date`s. */
export interface ReplayRequest {
  ids?: string[];
  topics?: string[];
  /** Name of an entry in `destinations`. */
  destination?: string;
  /** Inclusive lower bound of `created_at` (ISO-8601 text or a Date; a `Date` after parsing). */
  createdFrom?: string | Date;
  /** Exclusive upper bound of `created_at` (ISO-8601 text or a Date; a `Date` after parsing). */
  createdTo?: string | Date;
  /** States to move; default `['dead']`. */
  states?: Array<'sent' | 'dead'>;
}

/** The replay function's event: a request plus `dryRun` (preview only) and `yes` (confirm a large replay). */
export interface ReplayCommand {
  request: ReplayRequest;
  dryRun: boolean;
  yes: boolean;
}

/**
 * Validates an operator's replay request (a parsed JSON object, CLI options, a form).
 * Throws `UsageError` naming the offending key; requires at least one of ids, topics,
 * destination, createdFrom, createdTo.
 */
export function parseReplayRequest(input: unknown): ReplayRequest {
  return toRequest(parseWith(requestSchema, input));
}

/** Validates the replay function's event (the request keys plus `dryRun` and `yes`). */
export function parseReplayCommand(input: unknown): ReplayCommand {
  const { dryRun, yes, ...rest } = parseWith(commandSchema, input);
  return { request: toRequest(rest), dryRun: dryRun === true, yes: yes === true };
}

function parseWith<T extends z.ZodType>(schema: T, input: unknown): z.output<T> {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new UsageError('replay: the request must be an object of filters (ids, topics, destination, createdFrom, createdTo) and states');
  }
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  if (issue.code === 'unrecognized_keys') {
    throw new UsageError(`replay: unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => JSON.stringify(k)).join(', ')} (known: ids, topics, destination, createdFrom, createdTo, states)`);
  }
  const key = issue.path.map(String).join('.');
  throw new UsageError(`replay: ${key || 'request'} ${issue.message}`);
}

function toRequest(data: z.output<typeof requestSchema>): ReplayRequest {
  const request: ReplayRequest = { states: data.states ? [...new Set(data.states)] : ['dead'] };
  if (data.ids) request.ids = data.ids.map((id) => id.toLowerCase());
  if (data.topics) request.topics = data.topics;
  if (data.destination !== undefined) request.destination = data.destination;
  if (data.createdFrom !== undefined) request.createdFrom = new Date(data.createdFrom);
  if (data.createdTo !== undefined) request.createdTo = new Date(data.createdTo);
  if (!request.ids && !request.topics && request.destination === undefined && !request.createdFrom && !request.createdTo) {
    throw new UsageError('replay needs at least one filter: ids, topics, destination, createdFrom or createdTo');
  }
  if (request.createdFrom instanceof Date && request.createdTo instanceof Date && request.createdFrom >= request.createdTo) {
    throw new UsageError('replay: createdFrom must be before createdTo');
  }
  return request;
}

/** Turns a request (validated again here) into a driver filter; throws `UsageError` with the reason. */
export function resolveReplayFilter(config: Pick<QueueBoxConfig, 'outbox' | 'destinations'>, input: ReplayRequest): ReplayFilter {
  const request = parseReplayRequest(input);
  const filter: ReplayFilter = { states: request.states ?? ['dead'] };
  if (request.ids) filter.ids = request.ids;
  if (request.topics) filter.topics = request.topics;
  if (request.destination !== undefined) {
    const name = request.destination;
    if (!Object.hasOwn(config.destinations, name)) {
      const known = Object.keys(config.destinations);
      throw new UsageError(`replay: destination "${name}" is not configured (known: ${known.length ? known.join(', ') : 'none'})`);
    }
    const patterns = config.outbox.routes.filter((r) => r.destination === name).map((r) => r.topicPattern);
    if (patterns.length === 0) throw new UsageError(`replay: no route in outbox.routes sends to destination "${name}"`);
    filter.topicPatterns = patterns;
  }
  if (request.createdFrom !== undefined) filter.createdFrom = new Date(request.createdFrom);
  if (request.createdTo !== undefined) filter.createdTo = new Date(request.createdTo);
  return filter;
}

/** Counts the rows a replay would move now and shows the oldest `sampleSize` of them; moves nothing. */
export async function previewReplay(
  driver: Driver,
  config: Pick<QueueBoxConfig, 'outbox' | 'destinations'>,
  request: ReplayRequest,
  options: { sampleSize?: number } = {},
): Promise<{ count: number; sample: ReplayPreviewRow[] }> {
  const filter = resolveReplayFilter(config, request);
  return driver.outboxReplayPreview({ filter, limit: options.sampleSize ?? REPLAY_SAMPLE_SIZE });
}

/** Replays matching rows; returns how many moved to `pending`. */
export async function replayOutbox(driver: Driver, config: Pick<QueueBoxConfig, 'outbox' | 'destinations'>, request: ReplayRequest): Promise<{ moved: number }> {
  const filter = resolveReplayFilter(config, request);
  return { moved: await driver.outboxReplay(filter) };
}

/**
 * Runs a replay command as operator surfaces do: a dry run previews; a replay that would move
 * more than `confirmAbove` rows is refused unless `yes` (the refusal carries the count). Without
 * `yes` the move itself is bounded too (`maxRows: confirmAbove`): rows that die between the count
 * and the move cannot take it past `confirmAbove` — it then moves nothing and says so. With `yes`
 * the operator confirmed whatever matches when the move runs.
 */
export async function runReplayCommand(
  driver: Driver,
  config: Pick<QueueBoxConfig, 'outbox' | 'destinations'>,
  command: ReplayCommand,
  confirmAbove = REPLAY_CONFIRM_ABOVE,
): Promise<{ dryRun: true; count: number; sample: ReplayPreviewRow[] } | { moved: number }> {
  if (command.dryRun) return { dryRun: true, ...(await previewReplay(driver, config, command.request)) };
  if (command.yes) return replayOutbox(driver, config, command.request);
  const { count } = await previewReplay(driver, config, command.request, { sampleSize: 0 });
  const confirm = 'preview with a dry run, then confirm with --yes ("yes": true in the event)';
  if (count > confirmAbove) throw new UsageError(`replay would move ${count} rows (more than ${confirmAbove}): ${confirm}`);
  const filter = { ...resolveReplayFilter(config, command.request), maxRows: confirmAbove };
  try {
    return { moved: await driver.outboxReplay(filter) };
  } catch (error) {
    if (!(error instanceof ReplayLimitError)) throw error;
    throw new UsageError(`replay: ${count} rows matched when counted, but more than ${confirmAbove} match now (rows finished meanwhile); nothing moved: ${confirm}`, { cause: error });
  }
}
