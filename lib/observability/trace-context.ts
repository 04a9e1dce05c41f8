/**
 * The trace context a message carries from the code that wrote it to the code that reads it.
 *
 * `enqueue` records the caller's context with the outbox row: the W3C `traceparent` (and
 * `tracestate`) of OpenTelemetry's active span when `@opentelemetry/api` is installed (an
 * optional peer, loaded on the first `enqueue` and never when absent; in a bundle, where it cannot
 * be looked up, read from the API's process-wide registration), else the X-Ray trace
 * header of the Lambda invocation (`_X_AMZN_TRACE_ID`, read at each call: it changes per
 * invocation). The inbox receivers record the sender's header (`traceparent`, `X-Amzn-Trace-Id`,
 * SQS `AWSTraceHeader`) with the inbox row, and the relay copies it to the outbox row it writes.
 * The poller publishes it as the SQS `AWSTraceHeader` system attribute, the EventBridge
 * `TraceHeader`, and `traceparent` / `tracestate` (SQS message attributes; EventBridge
 * `detail.metadata`). Each form is derived from the other when only one is known (the trace and
 * parent ids are the same 128 and 64 bits in both).
 *
 * Every header is validated and bounded before it is kept: a malformed, oversized or hostile
 * value is dropped (the message is stored and delivered without it), never stored or refused.
 */
import { createRequire } from 'node:module';


/** The stored trace context of a row; every member optional, at least one present. */
export interface TraceContext {
  /** W3C `traceparent`, version `00` (55 characters). */
  traceparent?: string;
  /** W3C `tracestate`, at most `TRACESTATE_MAX_LENGTH` characters. */
  tracestate?: string;
  /** X-Ray trace header (`Root=1-…;Parent=…;Sampled=…`), at most `AWS_TRACE_HEADER_MAX_LENGTH` characters. */
  awsTraceHeader?: string;
}

/** Longest `tracestate` kept (the W3C recommendation for what a vendor propagates at least). */
export const TRACESTATE_MAX_LENGTH = 512;
/** Longest X-Ray trace header kept. */
export const AWS_TRACE_HEADER_MAX_LENGTH = 256;
/** Longest serialized trace context (the column bound). */
export const TRACE_CONTEXT_MAX_LENGTH = 1024;

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const TRACESTATE_KEY = /^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})$/;
// printable ASCII except `,` and `=`, not ending in a space
const TRACESTATE_VALUE = /^[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;
const XRAY_ROOT = /^1-([0-9a-f]{8})-([0-9a-f]{24})$/;
const XRAY_PARENT = /^[0-9a-f]{16}$/;
const XRAY_FIELD = /^[A-Za-z][A-Za-z0-9_-]{0,31}=[A-Za-z0-9_.:@/+?-]{1,128}$/;

/** The `traceparent` as kept (lower-case version `00`), or undefined when it is not a valid one. */
export function validTraceparent(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length !== 55) return undefined;
  const match = TRACEPARENT.exec(value);
  if (match === null) return undefined;
  const [, version, traceId, parentId] = match;
  if (version !== '00' || /^0+$/.test(traceId!) || /^0+$/.test(parentId!)) return undefined;
  return value;
}

/** The `tracestate` as kept (members trimmed, empty members left out), or undefined when invalid or too long. */
export function validTracestate(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > TRACESTATE_MAX_LENGTH) return undefined;
  const members = value.split(',').map((m) => m.trim()).filter((m) => m !== '');
  if (members.length === 0 || members.length > 32) return undefined;
  const keys = new Set<string>();
  for (const member of members) {
    const eq = member.indexOf('=');
    const key = member.slice(0, eq);
    if (eq < 1 || !TRACESTATE_KEY.test(key) || !TRACESTATE_VALUE.test(member.slice(eq + 1)) || keys.has(key)) return undefined;
    keys.add(key);
  }
  return members.join(',');
}

/**
 * The X-Ray trace header as kept (`Key=Value` fields joined by `;`, spaces around them removed),
 * or undefined when it has no valid `Root`, a malformed field, or is too long.
 */
export function validAwsTraceHeader(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > AWS_TRACE_HEADER_MAX_LENGTH) return undefined;
  const fields = value.split(';').map((f) => f.trim()).filter((f) => f !== '');
  if (fields.length === 0 || fields.length > 8 || !fields.every((f) => XRAY_FIELD.test(f))) return undefined;
  const root = fieldOf(fields, 'Root');
  if (root === undefined || !XRAY_ROOT.test(root)) return undefined;
  const parent = fieldOf(fields, 'Parent');
  if (parent !== undefined && !XRAY_PARENT.test(parent)) return undefined;
  return fields.join(';');
}

function fieldOf(fields: readonly string[], name: string): string | undefined {
  const field = fields.find((f) => f.startsWith(`${name}=`));
  return field?.slice(name.length + 1);
}

/** The valid members of `parts` as a `TraceContext`, or null when none is valid. */
export function traceContextOf(parts: { traceparent?: unknown; tracestate?: unknown; awsTraceHeader?: unknown }): TraceContext | null {
  const traceparent = validTraceparent(parts.traceparent);
  // `tracestate` means nothing without the `traceparent` it belongs to.
  const tracestate = traceparent === undefined ? undefined : validTracestate(parts.tracestate);
  const awsTraceHeader = validAwsTraceHeader(parts.awsTraceHeader);
  if (traceparent === undefined && awsTraceHeader === undefined) return null;
  return {
    ...(traceparent !== undefined ? { traceparent } : {}),
    ...(tracestate !== undefined ? { tracestate } : {}),
    ...(awsTraceHeader !== undefined ? { awsTraceHeader } : {}),
  };
}

/** The context as stored (JSON text), or null. */
export function serializeTraceContext(trace: TraceContext | null | undefined): string | null {
  if (trace === null || trace === undefined) return null;
  const text = JSON.stringify(trace);
  return text === '{}' || text.length > TRACE_CONTEXT_MAX_LENGTH ? null : text;
}

/** A stored context (JSON text, or the object a `jsonb` column parses to) validated again; null when absent or nothing valid. */
export function parseStoredTraceContext(stored: unknown): TraceContext | null {
  if (stored === null || stored === undefined) return null;
  let value: unknown = stored;
  if (typeof stored === 'string') {
    if (stored.length > TRACE_CONTEXT_MAX_LENGTH) return null;
    try {
      value = JSON.parse(stored);
    } catch {
      return null;
    }
  }
  if (typeof value !== 'object' || value === null) return null;
  return traceContextOf(value as Record<string, unknown>);
}

/** The W3C `traceparent` of `trace`: its own, or the one of its X-Ray header (which needs a `Parent`). */
export function traceparentOf(trace: TraceContext | null | undefined): string | undefined {
  if (trace?.traceparent !== undefined) return trace.traceparent;
  const header = trace?.awsTraceHeader;
  if (header === undefined) return undefined;
  const fields = header.split(';');
  const root = XRAY_ROOT.exec(fieldOf(fields, 'Root') ?? '');
  const parent = fieldOf(fields, 'Parent');
  if (root === null || parent === undefined) return undefined;
  return validTraceparent(`00-${root[1]}${root[2]}-${parent}-${fieldOf(fields, 'Sampled') === '1' ? '01' : '00'}`);
}

/** The X-Ray trace header of `trace`: its own, or the one of its `traceparent`. */
export function awsTraceHeaderOf(trace: TraceContext | null | undefined): string | undefined {
  if (trace?.awsTraceHeader !== undefined) return trace.awsTraceHeader;
  const match = trace?.traceparent === undefined ? null : TRACEPARENT.exec(trace.traceparent);
  if (match === null) return undefined;
  const [, , traceId, parentId, flags] = match;
  const sampled = (Number.parseInt(flags!, 16) & 1) === 1 ? '1' : '0';
  return `Root=1-${traceId!.slice(0, 8)}-${traceId!.slice(8)};Parent=${parentId};Sampled=${sampled}`;
}

/** What `captureTraceContext` reads of an OpenTelemetry span context. */
interface SpanContextLike {
  traceId?: unknown;
  spanId?: unknown;
  traceFlags?: unknown;
  traceState?: { serialize?(): unknown };
}

/** What `captureTraceContext` needs of `@opentelemetry/api`. */
interface OpenTelemetryApi {
  context: { active(): unknown };
  trace: { getSpanContext(context: never): SpanContextLike | undefined };
}

/** `@opentelemetry/api` once looked up: the module, null when not found, undefined before the first look. */
let openTelemetry: OpenTelemetryApi | null | undefined;

/**
 * `@opentelemetry/api` when it can be looked up from this module, else null; loaded on the first
 * call, synchronously: `enqueue` sends its INSERT in the same turn it is called, so a caller that
 * does not await it before `COMMIT` still writes the row inside its transaction. The API keeps its
 * context manager in a process-wide global, so this copy sees the context the application set.
 * A bundled application has no `node_modules` next to the bundle (and a CJS bundle no
 * `import.meta.url`): the look-up fails there, and `registeredSpanContext` reads that global itself.
 */
function loadOpenTelemetry(): OpenTelemetryApi | null {
  if (openTelemetry === undefined) {
    try {
      openTelemetry = createRequire(import.meta.url)('@opentelemetry/api') as OpenTelemetryApi;
    } catch {
      openTelemetry = null;
    }
  }
  return openTelemetry;
}

/**
 * Where every copy of `@opentelemetry/api` 1.x keeps what the application registered
 * (`{ version, context: ContextManager, trace: TracerProvider, … }`; `src/internal/global-utils.ts`),
 * and the context key of the active span (`src/trace/context-utils.ts`). A bundle inlines its own
 * copy of the API, which registers here like any other.
 */
const OPENTELEMETRY_GLOBAL = Symbol.for('opentelemetry.js.api.1');
const OPENTELEMETRY_SPAN_KEY = Symbol.for('OpenTelemetry Context Key SPAN');

/** The span context of the active span of the context manager the application registered, if any. */
function registeredSpanContext(): SpanContextLike | undefined {
  const registration = (globalThis as Record<symbol, unknown>)[OPENTELEMETRY_GLOBAL] as { context?: { active?: unknown } } | null | undefined;
  const manager = registration?.context;
  if (typeof manager?.active !== 'function') return undefined;
  const active = (manager.active as () => unknown).call(manager) as { getValue?: unknown } | null | undefined;
  if (typeof active?.getValue !== 'function') return undefined;
  const span = (active.getValue as (key: symbol) => unknown).call(active, OPENTELEMETRY_SPAN_KEY) as { spanContext?: unknown } | null | undefined;
  if (typeof span?.spanContext !== 'function') return undefined;
  return (span.spanContext as () => SpanContextLike | undefined).call(span) ?? undefined;
}

/** The active span's context: through `@opentelemetry/api` when it loads, else through its global registration. */
function activeSpanContext(): SpanContextLike | undefined {
  const api = loadOpenTelemetry();
  return api !== null ? api.trace.getSpanContext(api.context.active() as never) : registeredSpanContext();
}

/** The trace context of OpenTelemetry's active span, or null; never throws (a broken tracer setup only loses the context). */
function openTelemetryTraceContext(): TraceContext | null {
  try {
    const span = activeSpanContext();
    if (span === undefined || span === null || typeof span.traceId !== 'string' || typeof span.spanId !== 'string' || typeof span.traceFlags !== 'number') return null;
    const flags = (span.traceFlags & 0xff).toString(16).padStart(2, '0');
    const traceState = span.traceState;
    const tracestate = typeof traceState?.serialize === 'function' ? traceState.serialize() : undefined;
    return traceContextOf({ traceparent: `00-${span.traceId}-${span.spanId}-${flags}`, tracestate });
  } catch {
    return null;
  }
}

/** The X-Ray trace header of the current invocation (the runtime's invoke store, else the environment). */
function invocationXrayHeader(): string | undefined {
  const store = (globalThis as { awslambda?: { InvokeStore?: { getXRayTraceId?(): string | undefined } } }).awslambda?.InvokeStore;
  return store?.getXRayTraceId?.() ?? process.env._X_AMZN_TRACE_ID;
}

/**
 * The trace context of the caller, for a row written now: OpenTelemetry's active span when there
 * is one, else the X-Ray trace header of the Lambda invocation; null when neither is there.
 */
export function captureTraceContext(): TraceContext | null {
  return openTelemetryTraceContext() ?? traceContextOf({ awsTraceHeader: invocationXrayHeader() });
}
