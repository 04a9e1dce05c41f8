/**
 * A local EventBridge endpoint for laptops and tests: `PutEvents` over HTTP in the AWS JSON 1.1
 * protocol (`POST /`, `X-Amz-Target: AWSEvents.PutEvents`, `Content-Type:
 * application/x-amz-json-1.1`), so the real `@aws-sdk/client-eventbridge` client talks to it with
 * only `endpoint` changed. It keeps every accepted event per bus.
 *
 * It answers as EventBridge does: HTTP 200 with `FailedEntryCount` and one result per entry, in
 * request order (an `EventId`, or an `ErrorCode` and `ErrorMessage`); a request with no entries,
 * more than 10 entries or entries of 256 KB or more in total (AWS: the total entry size "must be
 * less than 256KB") is refused whole (`ValidationException`, HTTP 400). An entry without `Source`,
 * `DetailType` or `Detail` fails with `InvalidArgument`; a `Detail` that is not a JSON object, or
 * that breaks the JSON limits the `PutEvents` API reference states (an integer outside the signed
 * 64-bit range, nesting deeper than 1,000 levels), with `MalformedDetail`; an unknown bus with
 * `ResourceNotFoundException`.
 *
 * Faults for tests and demos: `failEntries(rule)` fails chosen entries with a chosen code
 * (`InternalFailure`, `ThrottlingException`, …); `failRequests(n, kind)` answers the next `n`
 * requests with `ThrottlingException` (HTTP 400) or `InternalException` (HTTP 500), which the SDK
 * retries by its own policy. Signatures are not checked. It listens on 127.0.0.1 only.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** `PutEvents` entries must add up to less than this, in bytes (entry sizes as AWS counts them). */
const MAX_REQUEST_BYTES = 262_144;
const MAX_ENTRIES = 10;
/** Deepest nesting of `Detail` processed (the API reference: "up to 1000 levels deep"; older versions said 1100). */
const MAX_DETAIL_DEPTH = 1000;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** An entry as the SDK sends it. */
export interface PutEventsEntry {
  Source?: string;
  DetailType?: string;
  Detail?: string;
  EventBusName?: string;
  Resources?: string[];
  Time?: number | string;
  TraceHeader?: string;
}

/** An event the endpoint accepted. */
export interface AcceptedEvent {
  eventId: string;
  bus: string;
  source: string;
  detailType: string;
  /** `Detail`, parsed. */
  detail: Record<string, unknown>;
  /** `Detail` as sent (JSON text; numbers with every digit). */
  detailText: string;
  /** `TraceHeader` as sent (the X-Ray trace header), when the entry had one. */
  traceHeader?: string;
  receivedAt: Date;
}

/** A per-entry failure: the entry is refused with this code (and message). */
export interface EntryFailure {
  ErrorCode: string;
  ErrorMessage?: string;
}

/** Chooses a failure for an entry (or none); `index` is the entry's place in its request. */
export type EntryFailureRule = (entry: PutEventsEntry, index: number) => EntryFailure | undefined;

export interface LocalEventBridgeOptions {
  /** Buses that exist (names); `default` always does. */
  buses?: string[];
  /** Port on 127.0.0.1; default: any free port. */
  port?: number;
  /** The entries of a request add up to less than this many bytes (default 262,144: the `PutEvents` reference; a bus that takes 1 MB events: 1048576). */
  maxRequestBytes?: number;
}

/** A running local EventBridge endpoint. */
export interface LocalEventBridge {
  /** `http://127.0.0.1:<port>`: the client's `endpoint`. */
  readonly endpoint: string;
  /** Accepted events, in arrival order (of one bus, when given). */
  events(bus?: string): AcceptedEvent[];
  /** Accepted events per bus. */
  counts(): Record<string, number>;
  /** `PutEvents` requests received (answered or refused). */
  readonly requests: number;
  /** Fails the entries `rule` picks, until replaced (`undefined` clears it). */
  failEntries(rule: EntryFailureRule | undefined): void;
  /** Answers the next `count` requests with a whole-request error. */
  failRequests(count: number, kind: 'throttle' | 'internal'): void;
  stop(): Promise<void>;
}

/** Starts the endpoint. */
export async function startLocalEventBridge(options: LocalEventBridgeOptions = {}): Promise<LocalEventBridge> {
  const buses = new Set(['default', ...(options.buses ?? [])]);
  const maxRequestBytes = options.maxRequestBytes ?? MAX_REQUEST_BYTES;
  const accepted: AcceptedEvent[] = [];
  let entryRule: EntryFailureRule | undefined;
  const requestFaults: Array<'throttle' | 'internal'> = [];
  let requests = 0;

  const server = createServer((req, res) => {
    readBody(req)
      .then((body) => {
        requests++;
        answer(req, res, body);
      })
      .catch((error: unknown) => sendError(res, 500, 'InternalException', String(error)));
  });

  function answer(req: IncomingMessage, res: ServerResponse, body: string): void {
    const target = req.headers['x-amz-target'];
    if (req.method !== 'POST' || target !== 'AWSEvents.PutEvents') {
      return sendError(res, 400, 'UnknownOperationException', `this endpoint serves AWSEvents.PutEvents only, not ${String(target)}`);
    }
    const fault = requestFaults.shift();
    if (fault === 'throttle') return sendError(res, 400, 'ThrottlingException', 'Rate exceeded');
    if (fault === 'internal') return sendError(res, 500, 'InternalException', 'An internal error occurred');
    let request: { Entries?: PutEventsEntry[] };
    try {
      request = JSON.parse(body) as { Entries?: PutEventsEntry[] };
    } catch {
      return sendError(res, 400, 'SerializationException', 'the request body is not JSON');
    }
    const entries = request.Entries ?? [];
    if (entries.length === 0 || entries.length > MAX_ENTRIES) {
      return sendError(res, 400, 'ValidationException', `1 validation error detected: Value at 'entries' failed to satisfy constraint: Member must have length between 1 and ${MAX_ENTRIES}`);
    }
    const size = entries.reduce((sum, e) => sum + Buffer.byteLength(e.Source ?? '') + Buffer.byteLength(e.DetailType ?? '') + Buffer.byteLength(e.Detail ?? ''), 0);
    if (size >= maxRequestBytes) return sendError(res, 400, 'ValidationException', `Total size of the entries in the request is over the limit (${size} bytes; it must be less than ${maxRequestBytes})`);
    const results = entries.map((entry, index) => resultOf(entry, index));
    res.writeHead(200, { 'content-type': 'application/x-amz-json-1.1', 'x-amzn-requestid': randomUUID() });
    res.end(JSON.stringify({ FailedEntryCount: results.filter((r) => 'ErrorCode' in r).length, Entries: results }));
  }

  function resultOf(entry: PutEventsEntry, index: number): { EventId: string } | EntryFailure {
    const injected = entryRule?.(entry, index);
    if (injected) return { ErrorCode: injected.ErrorCode, ErrorMessage: injected.ErrorMessage ?? `${injected.ErrorCode} (injected)` };
    if (!entry.Source || !entry.DetailType || entry.Detail === undefined) {
      return { ErrorCode: 'InvalidArgument', ErrorMessage: 'Parameters Source, DetailType and Detail are required.' };
    }
    let detail: unknown;
    let integerOutOfRange = false;
    try {
      detail = parseWithSource(entry.Detail, (source) => {
        if (/^-?\d+$/.test(source) && (BigInt(source) < INT64_MIN || BigInt(source) > INT64_MAX)) integerOutOfRange = true;
      });
    } catch {
      detail = undefined;
    }
    if (typeof detail !== 'object' || detail === null || Array.isArray(detail)) return { ErrorCode: 'MalformedDetail', ErrorMessage: 'Detail is malformed.' };
    // What AWS answers for these two is not documented; `MalformedDetail` (the code of a Detail
    // PutEvents cannot take) is assumed, and QueueBox refuses both before sending anyway.
    if (integerOutOfRange) return { ErrorCode: 'MalformedDetail', ErrorMessage: 'Detail is malformed: an integer is outside the signed 64-bit range.' };
    if (depthOf(detail) > MAX_DETAIL_DEPTH) return { ErrorCode: 'MalformedDetail', ErrorMessage: `Detail is malformed: nested deeper than ${MAX_DETAIL_DEPTH} levels.` };
    const bus = busName(entry.EventBusName);
    if (!buses.has(bus)) return { ErrorCode: 'ResourceNotFoundException', ErrorMessage: `Event bus ${bus} does not exist.` };
    const eventId = randomUUID();
    accepted.push({ eventId, bus, source: entry.Source, detailType: entry.DetailType, detail: detail as Record<string, unknown>, detailText: entry.Detail, ...(entry.TraceHeader !== undefined ? { traceHeader: entry.TraceHeader } : {}), receivedAt: new Date() });
    return { EventId: eventId };
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    endpoint: `http://127.0.0.1:${port}`,
    events: (bus) => accepted.filter((e) => bus === undefined || e.bus === bus),
    counts: () => {
      const counts: Record<string, number> = Object.fromEntries([...buses].map((b) => [b, 0]));
      for (const e of accepted) counts[e.bus] = (counts[e.bus] ?? 0) + 1;
      return counts;
    },
    get requests() {
      return requests;
    },
    failEntries(rule) {
      entryRule = rule;
    },
    failRequests(count, kind) {
      for (let i = 0; i < count; i++) requestFaults.push(kind);
    },
    stop: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}

/** `JSON.parse` that shows `onNumber` the source text of every number (as written, every digit). */
function parseWithSource(text: string, onNumber: (source: string) => void): unknown {
  const parse = JSON.parse as (text: string, reviver: (key: string, value: unknown, context?: { source?: string }) => unknown) => unknown;
  return parse(text, (_key, value, context) => {
    if (typeof value === 'number' && context?.source !== undefined) onNumber(context.source);
    return value;
  });
}

/** Nesting depth of a parsed JSON value: a scalar is 0, `{}` and `[]` are 1. */
function depthOf(value: unknown): number {
  let deepest = 0;
  let level = [value];
  for (;;) {
    const containers = level.filter((v): v is object => typeof v === 'object' && v !== null);
    if (containers.length === 0) return deepest;
    deepest++;
    level = containers.flatMap((v) => Object.values(v));
  }
}

/** The bus of an entry: a name, or the name at the end of a bus ARN; `default` when absent. */
function busName(value: string | undefined): string {
  if (value === undefined || value === '') return 'default';
  return value.startsWith('arn:') ? value.slice(value.lastIndexOf('/') + 1) : value;
}

function sendError(res: ServerResponse, status: number, type: string, message: string): void {
  res.writeHead(status, { 'content-type': 'application/x-amz-json-1.1', 'x-amzn-errortype': type, 'x-amzn-requestid': randomUUID() });
  res.end(JSON.stringify({ __type: type, message }));
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
