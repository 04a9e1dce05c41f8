/**
 * Replay as an operation (spec §7): move `dead` (or, when asked, `sent`) outbox rows back to
 * `pending` by filter; with `table: 'inbox'`, requeue `dead` inbox rows (relay and pull) the same way.
 *
 * Every operator input — the replay function's event, the CLI flags, a console's form — goes
 * through one strict schema (`parseReplayRequest`): an unknown key, a wrong type, an empty list,
 * a `null` or a non-time is refused with a `UsageError` naming the key, so a misspelled filter can
 * never widen a replay. At least one real filter is required; states default to `dead` only.
 * A destination is resolved to the topic patterns of the routes that name it. The driver resets
 * attempt, schedule, error and claim columns, keeps `id` and `sequence`, and increments
 * `replay_count` (the FIFO destination derives a fresh deduplication id from it).
 *
 * Inbox rows filter by ids, sources, consumption (`push`: the relay's, `pull`), created range and
 * last error; only `dead` rows move. A requeued inbox row keeps `id` and `sequence`, so it is its
 * aggregate's head again: the aggregate's later open rows wait for it, and rows of it already
 * processed are not redone. Topics and destination are outbox filters; sources and consumption
 * inbox filters: one given for the other table is refused, never ignored.
 */
import { z } from 'zod';
import type { QueueBoxConfig } from '../config/schema.ts';
import type { Driver, InboxReplayFilter, InboxReplayPreviewRow, ReplayFilter, ReplayPreviewRow } from '../db/driver.ts';
import { ReplayLimitError, UsageError } from '../errors.ts';
import { operatorTimeProblem } from './operator-time.ts';

export type { InboxReplayPreviewRow, ReplayPreviewRow } from '../db/driver.ts';

/** A row of a preview of either table. */
export type AnyReplayPreviewRow = ReplayPreviewRow | InboxReplayPreviewRow;

/** What a preview returns: how many rows match now and the oldest of them. */
export interface ReplayPreview {
  count: number;
  sample: AnyReplayPreviewRow[];
}

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
  states: z.array(z.enum(['sent', 'dead'], { error: 'is not a state replay moves (only sent or dead)' })).min(1, 'must list at least one state'),
  table: z.enum(['outbox', 'inbox'], { error: 'must be outbox or inbox' }),
  sources: nonEmptyList(z.string().min(1, 'must not be empty').refine((t) => !t.includes('\0'), 'must not contain a NUL character'), 'source'),
  consumption: z.enum(['push', 'pull'], { error: 'must be push (the relay) or pull' }),
  lastErrorPrefix: z.string().min(1, 'must not be empty').max(4000, 'must be at most 4000 characters').refine((t) => !t.includes('\0'), 'must not contain a NUL character'),
};

const requestSchema = z.strictObject({
  table: requestShape.table.optional(),
  ids: requestShape.ids.optional(),
  topics: requestShape.topics.optional(),
  destination: requestShape.destination.optional(),
  sources: requestShape.sources.optional(),
  consumption: requestShape.consumption.optional(),
  createdFrom: requestShape.createdFrom.optional(),
  createdTo: requestShape.createdTo.optional(),
  lastErrorPrefix: requestShape.lastErrorPrefix.optional(),
  states: requestShape.states.optional(),
});

/** The request keys, as the refusal of an unknown one lists them. */
const KNOWN_KEYS = 'table, ids, topics, destination, sources, consumption, createdFrom, createdTo, lastErrorPrefix, states';

/** A field of a replay request. */
export type ReplayField = keyof z.output<typeof requestSchema>;

/**
 * What an operator surface calls each request field, for its refusals: the CLI passes its flags
 * (`--created-from`), so a refusal names what the operator typed; the function event and the
 * console's form, whose fields are the keys, use the keys (the default).
 */
export type ReplayFieldNames = Readonly<Record<ReplayField, string>>;

const REQUEST_KEYS: ReplayFieldNames = {
  table: 'table',
  ids: 'ids',
  topics: 'topics',
  destination: 'destination',
  sources: 'sources',
  consumption: 'consumption',
  createdFrom: 'createdFrom',
  createdTo: 'createdTo',
  lastErrorPrefix: 'lastErrorPrefix',
  states: 'states',
};

const commandSchema = requestSchema.extend({ dryRun: z.boolean().optional(), yes: z.boolean().optional() }).strict();

/** A replay request; `parseReplayRequest` returns it with `states` filled (default `['dead']`) and times as `Date`s. */
export interface ReplayRequest {
  /** The table whose rows move; default `outbox`. */
  table?: 'outbox' | 'inbox';
  ids?: string[];
  /** Outbox: exact topics. */
  topics?: string[];
  /** Outbox: name of an entry in `destinations`. */
  destination?: string;
  /** Inbox: exact source names. */
  sources?: string[];
  /** Inbox: only rows of this consumption (`push`: the relay's; `pull`). Narrows another filter; is none itself. */
  consumption?: 'push' | 'pull';
  /** Rows whose last error starts with this text (exactly, case included). */
  lastErrorPrefix?: string;
  /** Inclusive lower bound of `created_at` (ISO-8601 text or a Date; a `Date` after parsing). */
  createdFrom?: string | Date;
  /** Exclusive upper bound of `created_at` (ISO-8601 text or a Date; a `Date` after parsing). */
  createdTo?: string | Date;
  /** States to move; default `['dead']`. The inbox moves `dead` rows only. */
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
 * Throws `UsageError` naming the offending field as `names` calls it (default: by key, `ids.0`
 * for an item of a list); requires at least one of ids, topics, destination, createdFrom,
 * createdTo, lastErrorPrefix (inbox: sources instead of topics and destination).
 */
export function parseReplayRequest(input: unknown, names?: ReplayFieldNames): ReplayRequest {
  return toRequest(parseWith(requestSchema, input, names), names);
}

/** Validates the replay function's event (the request keys plus `dryRun` and `yes`). */
export function parseReplayCommand(input: unknown): ReplayCommand {
  const { dryRun, yes, ...rest } = parseWith(commandSchema, input);
  return { request: toRequest(rest), dryRun: dryRun === true, yes: yes === true };
}

function parseWith<T extends z.ZodType>(schema: T, input: unknown, names?: ReplayFieldNames): z.output<T> {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new UsageError(`replay: the request must be an object of filters and options (${KNOWN_KEYS})`);
  }
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  if (issue.code === 'unrecognized_keys') {
    throw new UsageError(`replay: unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => JSON.stringify(k)).join(', ')} (known: ${KNOWN_KEYS})`);
  }
  throw new UsageError(`replay: ${issueSubject(issue.path, input as Record<string, unknown>, names)} ${issue.message}`);
}

/**
 * What a refusal names: by key, the path (`createdFrom`, `ids.0`); by the surface's own names,
 * the field's name and, for an item of a list, the item (`--id "nope"`): a flag given several
 * times has no position an operator would count.
 */
function issueSubject(path: readonly PropertyKey[], input: Record<string, unknown>, names: ReplayFieldNames | undefined): string {
  const [field, index] = path;
  if (field === undefined) return 'request';
  if (names === undefined || !Object.hasOwn(names, field)) return path.map(String).join('.');
  const name = names[field as ReplayField];
  const list = input[field as string];
  return typeof index === 'number' && Array.isArray(list) ? `${name} ${JSON.stringify(list[index])}` : name;
}

function toRequest(data: z.output<typeof requestSchema>, names: ReplayFieldNames = REQUEST_KEYS): ReplayRequest {
  const named = (fields: readonly ReplayField[]) => fields.map((f) => names[f]);
  const table = data.table ?? 'outbox';
  const request: ReplayRequest = { states: data.states ? [...new Set(data.states)] : ['dead'] };
  if (data.table !== undefined) request.table = data.table;
  if (data.ids) request.ids = data.ids.map((id) => id.toLowerCase());
  if (data.topics) request.topics = data.topics;
  if (data.destination !== undefined) request.destination = data.destination;
  if (data.sources) request.sources = data.sources;
  if (data.consumption !== undefined) request.consumption = data.consumption;
  if (data.createdFrom !== undefined) request.createdFrom = new Date(data.createdFrom);
  if (data.createdTo !== undefined) request.createdTo = new Date(data.createdTo);
  if (data.lastErrorPrefix !== undefined) request.lastErrorPrefix = data.lastErrorPrefix;
  if (table === 'inbox') {
    const outboxOnly = (['topics', 'destination'] as const).filter((k) => request[k] !== undefined);
    if (outboxOnly.length > 0) {
      throw new UsageError(`replay: ${named(outboxOnly).join(' and ')} filter${outboxOnly.length > 1 ? '' : 's'} outbox rows; inbox rows filter by ${names.sources} (and ${names.consumption})`);
    }
    if (request.states!.some((s) => s !== 'dead')) throw new UsageError('replay: the inbox requeues dead rows only (a processed row was already forwarded or handled)');
  } else {
    const inboxOnly = (['sources', 'consumption'] as const).filter((k) => request[k] !== undefined);
    if (inboxOnly.length > 0) {
      const table = names === REQUEST_KEYS ? 'table inbox (--table inbox)' : `${names.table} inbox`;
      throw new UsageError(`replay: ${named(inboxOnly).join(' and ')} filter${inboxOnly.length > 1 ? '' : 's'} inbox rows; add ${table}, or filter outbox rows by ${names.topics} or ${names.destination}`);
    }
  }
  if (!request.ids && !request.topics && request.destination === undefined && !request.sources && !request.createdFrom && !request.createdTo && request.lastErrorPrefix === undefined) {
    const filters = named(table === 'inbox' ? ['ids', 'sources', 'createdFrom', 'createdTo'] : ['ids', 'topics', 'destination', 'createdFrom', 'createdTo']);
    throw new UsageError(`replay needs at least one filter: ${filters.join(', ')} or ${names.lastErrorPrefix}`);
  }
  if (request.createdFrom instanceof Date && request.createdTo instanceof Date && request.createdFrom >= request.createdTo) {
    throw new UsageError(`replay: ${names.createdFrom} must be before ${names.createdTo}`);
  }
  return request;
}

/** Turns a request (validated again here) into an outbox driver filter; throws `UsageError` with the reason. */
export function resolveReplayFilter(config: Pick<QueueBoxConfig, 'outbox' | 'destinations'>, input: ReplayRequest): ReplayFilter {
  const request = parseReplayRequest(input);
  if (request.table === 'inbox') throw new UsageError('replay: an inbox request has no outbox filter (resolveInboxReplayFilter)');
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
  if (request.lastErrorPrefix !== undefined) filter.lastErrorPrefix = request.lastErrorPrefix;
  return filter;
}

/** Turns an inbox request (validated again here) into an inbox driver filter; throws `UsageError` with the reason. */
export function resolveInboxReplayFilter(input: ReplayRequest): InboxReplayFilter {
  const request = parseReplayRequest(input);
  if (request.table !== 'inbox') throw new UsageError('replay: an outbox request has no inbox filter (resolveReplayFilter)');
  const filter: InboxReplayFilter = {};
  if (request.ids) filter.ids = request.ids;
  if (request.sources) filter.sources = request.sources;
  if (request.consumption !== undefined) filter.consumption = request.consumption;
  if (request.createdFrom !== undefined) filter.createdFrom = new Date(request.createdFrom);
  if (request.createdTo !== undefined) filter.createdTo = new Date(request.createdTo);
  if (request.lastErrorPrefix !== undefined) filter.lastErrorPrefix = request.lastErrorPrefix;
  return filter;
}

/** Bounds a move may add to its request's filter (`ReplayFilter.maxRows`, `ReplayFilter.asRead`). */
export interface ReplayMoveBounds {
  maxRows?: number;
  asRead?: Array<{ id: string; updatedAtMs: number }>;
}

/** One request's preview and move, on the table it names (validated, filter resolved, once). */
export interface ReplayTarget {
  table: 'outbox' | 'inbox';
  preview(limit: number): Promise<ReplayPreview>;
  move(bounds?: ReplayMoveBounds): Promise<number>;
}

/** The preview and move of `request` on its table; throws `UsageError` for a bad request. */
export function replayTarget(driver: Driver, config: Pick<QueueBoxConfig, 'outbox' | 'destinations'>, request: ReplayRequest): ReplayTarget {
  if (parseReplayRequest(request).table === 'inbox') {
    const filter = resolveInboxReplayFilter(request);
    return { table: 'inbox', preview: (limit) => driver.inboxReplayPreview({ filter, limit }), move: (bounds = {}) => driver.inboxReplay({ ...filter, ...bounds }) };
  }
  const filter = resolveReplayFilter(config, request);
  return { table: 'outbox', preview: (limit) => driver.outboxReplayPreview({ filter, limit }), move: (bounds = {}) => driver.outboxReplay({ ...filter, ...bounds }) };
}

/** Counts the rows a replay would move now and shows the oldest `sampleSize` of them; moves nothing. */
export async function previewReplay(
  driver: Driver,
  config: Pick<QueueBoxConfig, 'outbox' | 'destinations'>,
  request: ReplayRequest,
  options: { sampleSize?: number } = {},
): Promise<ReplayPreview> {
  return replayTarget(driver, config, request).preview(options.sampleSize ?? REPLAY_SAMPLE_SIZE);
}

/** Replays matching rows (outbox or inbox, as the request says); returns how many moved to `pending`. */
export async function replayRows(driver: Driver, config: Pick<QueueBoxConfig, 'outbox' | 'destinations'>, request: ReplayRequest): Promise<{ moved: number }> {
  return { moved: await replayTarget(driver, config, request).move() };
}

/**
 * Runs a replay command as operator surfaces do: a dry run previews; a replay that would move
 * more than `confirmAbove` rows is refused unless `yes` (the refusal carries the count). Without
 * `yes` the move itself is bounded too (`maxRows: confirmAbove`): rows that die between the count
 * and the move cannot take it past `confirmAbove` — it then moves nothing and says so. With `yes`
 * the operator confirmed whatever matches when the move runs. The same for both tables.
 */
export async function runReplayCommand(
  driver: Driver,
  config: Pick<QueueBoxConfig, 'outbox' | 'destinations'>,
  command: ReplayCommand,
  confirmAbove = REPLAY_CONFIRM_ABOVE,
): Promise<({ dryRun: true } & ReplayPreview) | { moved: number }> {
  const target = replayTarget(driver, config, command.request);
  if (command.dryRun) return { dryRun: true, ...(await target.preview(REPLAY_SAMPLE_SIZE)) };
  if (command.yes) return { moved: await target.move() };
  const { count } = await target.preview(0);
  const confirm = 'preview with a dry run, then confirm with --yes ("yes": true in the event)';
  if (count > confirmAbove) throw new UsageError(`replay would move ${count} rows (more than ${confirmAbove}): ${confirm}`);
  try {
    return { moved: await target.move({ maxRows: confirmAbove }) };
  } catch (error) {
    if (!(error instanceof ReplayLimitError)) throw error;
    throw new UsageError(`replay: ${count} rows matched when counted, but more than ${confirmAbove} match now (rows finished meanwhile); nothing moved: ${confirm}`, { cause: error });
  }
}
