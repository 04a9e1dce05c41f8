/**
 * What a row's page shows of its stored trace context: the ids an operator needs to find the
 * writer's (outbox) or sender's (inbox) trace — the W3C trace id, the parent span id, the sampled
 * flag, and the X-Ray form of the trace id (`1-<8 hex digits: epoch seconds>-<24 hex digits>`) to
 * paste into the X-Ray console or CloudWatch.
 *
 * Everything shown is taken from the members that validate (`parseStoredTraceContext`, the rules
 * the poller applies before it publishes them); a stored value with no valid member is "invalid"
 * and none of it is shown. Of `tracestate` only the vendor keys are shown, not their values: the
 * values are opaque vendor data (account, tenant or sampling details, sometimes tokens), not
 * needed to find the trace, and of no shape the redactor could recognise; of a multi-tenant key
 * only its system (`vendorOf`), and long keys cut. Likewise only the
 * `Root`, `Parent` and `Sampled` fields of an X-Ray header are shown, not its other fields.
 */
import { parseStoredTraceContext, TRACE_CONTEXT_MAX_LENGTH, type TraceContext } from '../observability/trace-context.ts';

/** The members a stored trace context has (`TraceContext`'s keys), in the order they are named. */
const MEMBERS = ['traceparent', 'tracestate', 'awsTraceHeader'] as const;

/** What the row page shows of a stored trace context. */
export type TraceView =
  | { kind: 'none' }
  | { kind: 'invalid' }
  | {
      kind: 'valid';
      /** The W3C trace id: 32 lower-case hex digits. */
      traceId: string;
      /** The X-Ray trace id, `1-xxxxxxxx-yyyyyyyyyyyyyyyyyyyyyyyy`: the stored X-Ray header's `Root`, else the W3C trace id in X-Ray form. */
      xrayTraceId: string;
      /** The span that wrote (or sent) the row: 16 hex digits; undefined when not recorded (an X-Ray header without `Parent`). */
      parentSpanId: string | undefined;
      /** The sampled flag; undefined when the caller left the decision open (an X-Ray header without `Sampled=1`/`0`). */
      sampled: boolean | undefined;
      /** The forms stored: `traceparent`, `X-Ray header`. */
      forms: string[];
      /** The vendor keys of the stored `tracestate` (empty when none); their values are not shown. */
      tracestateVendors: string[];
      /** Stored members left out because they did not validate (by member name only). */
      leftOut: string[];
      /** Both forms stored, naming different traces (the X-Ray id is then the X-Ray header's, the trace id the `traceparent`'s). */
      formsDiffer: boolean;
    };

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const XRAY_ROOT = /^1-([0-9a-f]{8})-([0-9a-f]{24})$/;

/** The view of a stored `trace_context` (a `jsonb` value as read, or JSON text; null or undefined when the row has none). */
export function traceView(stored: unknown): TraceView {
  // JSON text `null` (SQL Server returns the column's JSON text) is no trace context, as a jsonb null is.
  if (stored === null || stored === undefined || (typeof stored === 'string' && stored.trim() === 'null')) return { kind: 'none' };
  const trace = parseStoredTraceContext(stored);
  if (trace === null) return { kind: 'invalid' };
  const w3c = trace.traceparent === undefined ? null : TRACEPARENT.exec(trace.traceparent);
  const xray = trace.awsTraceHeader === undefined ? undefined : xrayFields(trace.awsTraceHeader);
  const root = xray === undefined ? null : XRAY_ROOT.exec(xray.get('Root') ?? '');
  // `parseStoredTraceContext` keeps a context only with a valid traceparent or X-Ray Root.
  const traceId = w3c !== null ? w3c[1]! : `${root![1]}${root![2]}`;
  const xrayTraceId = root !== null ? root[0] : `1-${traceId.slice(0, 8)}-${traceId.slice(8)}`;
  const sampledField = xray?.get('Sampled');
  return {
    kind: 'valid',
    traceId,
    xrayTraceId,
    parentSpanId: w3c !== null ? w3c[2]! : xray?.get('Parent'),
    sampled: w3c !== null ? (Number.parseInt(w3c[3]!, 16) & 1) === 1 : sampledField === '1' ? true : sampledField === '0' ? false : undefined,
    forms: [...(w3c !== null ? ['traceparent'] : []), ...(root !== null ? ['X-Ray header'] : [])],
    tracestateVendors: trace.tracestate === undefined ? [] : trace.tracestate.split(',').map((member) => vendorOf(member.slice(0, member.indexOf('=')))),
    leftOut: leftOut(stored, trace),
    formsDiffer: w3c !== null && root !== null && `${root[1]}${root[2]}` !== w3c[1],
  };
}

/** The longest simple `tracestate` key shown whole; a longer one is cut here, with `…`. */
export const VENDOR_KEY_SHOWN_CHARS = 32;

/**
 * What is shown of a `tracestate` key: the system of a multi-tenant key (`tenant@system`: the
 * tenant id names the vendor's customer, e.g. a monitoring account), a simple key as it is up to
 * `VENDOR_KEY_SHOWN_CHARS` characters. A key is up to 256 characters of the W3C grammar, which a
 * sender may fill with anything of that alphabet; the vendor names that identify a trace system are short.
 */
export function vendorOf(key: string): string {
  const at = key.indexOf('@');
  if (at !== -1) return key.slice(at + 1);
  return key.length > VENDOR_KEY_SHOWN_CHARS ? `${key.slice(0, VENDOR_KEY_SHOWN_CHARS)}…` : key;
}

/** The fields of a validated X-Ray header (`Key=Value;…`), first of each name. */
function xrayFields(header: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const field of header.split(';')) {
    const eq = field.indexOf('=');
    const name = field.slice(0, eq);
    if (!fields.has(name)) fields.set(name, field.slice(eq + 1));
  }
  return fields;
}

/** The known members the stored value has that `trace` did not keep (names only, never their values). */
function leftOut(stored: unknown, trace: TraceContext): string[] {
  let value: unknown = stored;
  if (typeof stored === 'string') {
    // Already parsed once by `parseStoredTraceContext`, which bounds the length the same way.
    if (stored.length > TRACE_CONTEXT_MAX_LENGTH) return [];
    try {
      value = JSON.parse(stored);
    } catch {
      return [];
    }
  }
  if (typeof value !== 'object' || value === null) return [];
  const members = value as Record<string, unknown>;
  return MEMBERS.filter((name) => members[name] !== undefined && members[name] !== null && trace[name] === undefined);
}
