/**
 * One shape for the two API Gateway proxy event formats: HTTP API payload 2.0
 * (`requestContext.http.method`, `rawPath`) and REST API / payload 1.0 (`httpMethod`, `path`).
 */
import type { APIGatewayProxyEvent, APIGatewayProxyEventV2 } from 'aws-lambda';
import { InboxRejectionError } from './inbox-rejection.ts';
import type { HeaderLookup } from './source-auth.ts';

/** What the receiver needs of a request, whichever format carried it. */
export interface HttpRequest {
  method: string;
  /** Path without the stage prefix of a named stage (payload 2.0 `rawPath`; payload 1.0 `path` has none). */
  path: string;
  headers: HeaderLookup;
  /** The body as bytes (base64 decoded when the event says so). */
  body: Buffer;
}

/** An API Gateway proxy event of either format. */
export type ApiGatewayEvent = APIGatewayProxyEventV2 | APIGatewayProxyEvent;

/** Reads an API Gateway event of either format; refuses anything else as an unknown source (404). */
export function httpRequestOf(event: unknown): HttpRequest {
  if (typeof event !== 'object' || event === null) throw new InboxRejectionError('unknown_source', 'not an API Gateway request');
  const e = event as Partial<APIGatewayProxyEventV2> & Partial<APIGatewayProxyEvent>;
  const v2 = e.requestContext !== undefined && 'http' in e.requestContext ? (e as APIGatewayProxyEventV2) : undefined;
  const method = v2?.requestContext.http.method ?? e.httpMethod;
  // Payload 2.0's `rawPath` starts with `/<stage>` on a named stage; payload 1.0's `path` is the
  // resource path and never holds the stage (that is in `requestContext.path`), so it is taken as is.
  const path = v2 ? withoutStage(v2.rawPath ?? v2.requestContext.http.path, v2.requestContext.stage) : e.path;
  if (typeof method !== 'string' || typeof path !== 'string') throw new InboxRejectionError('unknown_source', 'not an API Gateway request');
  return {
    method: method.toUpperCase(),
    path,
    headers: headerLookup(e.headers ?? undefined),
    body: Buffer.from(typeof e.body === 'string' ? e.body : '', e.isBase64Encoded === true ? 'base64' : 'utf8'),
  };
}

function withoutStage(path: unknown, stage: string | undefined): unknown {
  if (typeof path === 'string' && stage && stage !== '$default' && path.startsWith(`/${stage}/`)) return path.slice(stage.length + 1);
  return path;
}

/** Case-insensitive lookup over API Gateway headers (HTTP APIs lower-case them; REST APIs do not). */
export function headerLookup(headers: Readonly<Record<string, string | undefined>> | undefined): HeaderLookup {
  const lower = new Map<string, string>();
  for (const [name, value] of Object.entries(headers ?? {})) if (value !== undefined) lower.set(name.toLowerCase(), value);
  return (name) => lower.get(name.toLowerCase());
}
