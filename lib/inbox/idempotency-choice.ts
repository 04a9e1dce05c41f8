/**
 * How an HTTP source tells deliveries apart, and the idempotency key of one request.
 *
 * Every source makes an explicit choice (checked at config load), or takes its scheme's default:
 * - `idempotencyKeyPath`: a value in the body (on an unsigned source, `X-Idempotency-Key` first);
 * - `idempotencyKeyHeader`: the delivery id a header carries;
 * - `idempotency: none`: every delivery is stored (a random key), replays included;
 * - `idempotency: body-digest`: the SHA-256 of the body, so identical bodies are one message.
 * Defaults: `stripe` → `$.id` (the event id, the same on Stripe's retries); `github` → the
 * `X-GitHub-Delivery` header (the same on GitHub's redeliveries); `bearer`, `api-key` and `none`
 * → the `X-Idempotency-Key` header. A generic `hmac` source has no default.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { SourceConfig } from '../config/schema.ts';
import { ConfigError } from '../errors.ts';
import { InboxRejectionError } from './inbox-rejection.ts';
import { jsonPathText } from './json-path-value.ts';
import { isSigned, type HeaderLookup } from './source-auth.ts';

/** Where a source's idempotency key comes from. */
export type IdempotencyChoice =
  | { kind: 'path'; path: string; header?: string }
  | { kind: 'header'; header: string }
  | { kind: 'none' }
  | { kind: 'body-digest' };

/** The choice of `source`: its own keys, else its scheme's default; throws `ConfigError` for an `hmac` source with none (config load refuses it first). */
export function idempotencyChoice(sourceName: string, source: SourceConfig): IdempotencyChoice {
  if (source.idempotency !== undefined) return { kind: source.idempotency };
  if (source.idempotencyKeyHeader !== undefined) return { kind: 'header', header: source.idempotencyKeyHeader };
  if (source.idempotencyKeyPath !== undefined) {
    return isSigned(source.auth) ? { kind: 'path', path: source.idempotencyKeyPath } : { kind: 'path', path: source.idempotencyKeyPath, header: 'X-Idempotency-Key' };
  }
  switch (source.auth?.type) {
    case 'stripe':
      return { kind: 'path', path: '$.id' };
    case 'github':
      return { kind: 'header', header: 'X-GitHub-Delivery' };
    case 'hmac':
      throw new ConfigError([{ key: `inbox.sources.${sourceName}.idempotency`, message: 'is required for an hmac source (or idempotencyKeyPath, idempotencyKeyHeader)' }]);
    default:
      return { kind: 'header', header: 'X-Idempotency-Key' };
  }
}

/** The idempotency key of one request under `choice`; throws `InboxRejectionError` (400) when the request has none. */
export function idempotencyKeyOf(choice: IdempotencyChoice, headers: HeaderLookup, body: unknown, rawBody: Buffer, at: string): string {
  switch (choice.kind) {
    case 'none':
      return `delivery:${randomUUID()}`;
    case 'body-digest':
      return `sha256:${createHash('sha256').update(rawBody).digest('hex')}`;
    case 'header': {
      const value = headers(choice.header);
      if (value === undefined || value === '') throw new InboxRejectionError('missing_idempotency_key', `missing idempotency key: send the ${choice.header} header`);
      return value;
    }
    case 'path': {
      const fromHeader = choice.header === undefined ? undefined : headers(choice.header);
      if (fromHeader !== undefined && fromHeader !== '') return fromHeader;
      const value = jsonPathText(body, choice.path, at);
      if (value === undefined || value === '') {
        const header = choice.header === undefined ? '' : `send the ${choice.header} header or `;
        throw new InboxRejectionError('missing_idempotency_key', `missing idempotency key: ${header}put a value at ${choice.path} in the body`);
      }
      return value;
    }
  }
}
