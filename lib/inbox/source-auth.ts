/**
 * Authentication of HTTP sources (spec §5): `hmac` (signature over `${timestamp}.${rawBody}`
 * with a timestamp tolerance), `bearer`, `api-key`, or `none`.
 *
 * Secrets are read once, when the receiver is built: a missing secret is a `ConfigError` naming
 * the key. Every comparison is constant-time (`crypto.timingSafeEqual` on equal-length buffers).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { requireSecret } from '../config/load-config.ts';
import type { AuthConfig } from '../config/schema.ts';
import { InboxRejectionError } from './inbox-rejection.ts';

/** Case-insensitive header lookup of one request. */
export type HeaderLookup = (name: string) => string | undefined;

/** Checks one request; throws `InboxRejectionError('unauthorized')` when it is refused. */
export type Authenticator = (headers: HeaderLookup, rawBody: Buffer, nowMs: number) => void;

/** True when `a` equals `b`, compared in constant time for equal lengths. */
export function safeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a, 'utf8');
  const right = Buffer.from(b, 'utf8');
  if (left.length !== right.length) {
    // Keep the work independent of where the strings differ; the answer is still false.
    timingSafeEqual(right, right);
    return false;
  }
  return timingSafeEqual(left, right);
}

function refuse(message: string): never {
  throw new InboxRejectionError('unauthorized', message);
}

/** The hex HMAC a sender must put in the signature header. */
export function hmacSignature(algorithm: string, secret: string, timestamp: string, rawBody: Buffer): string {
  return createHmac(algorithm, secret).update(`${timestamp}.`).update(rawBody).digest('hex');
}

/** Builds the authenticator of source `sourceName`; throws `ConfigError` when its secret is unset. */
export function createAuthenticator(sourceName: string, auth: AuthConfig, env: Readonly<Record<string, string | undefined>>): Authenticator {
  const key = `inbox.sources.${sourceName}.auth`;
  switch (auth.type) {
    case 'none':
      return () => {};
    case 'bearer': {
      const token = requireSecret(env, auth.tokenEnv, `${key}.tokenEnv`);
      return (headers) => {
        const match = /^Bearer\s+(.+)$/i.exec(headers('authorization') ?? '');
        if (!match) refuse('missing bearer token: send Authorization: Bearer <token>');
        if (!safeEqual(match[1]!.trim(), token)) refuse('invalid bearer token');
      };
    }
    case 'api-key': {
      const apiKey = requireSecret(env, auth.keyEnv, `${key}.keyEnv`);
      return (headers) => {
        const given = headers(auth.header);
        if (given === undefined || given === '') refuse(`missing API key: send the ${auth.header} header`);
        if (!safeEqual(given, apiKey)) refuse('invalid API key');
      };
    }
    case 'hmac': {
      const secret = requireSecret(env, auth.secretEnv, `${key}.secretEnv`);
      return (headers, rawBody, nowMs) => {
        const timestamp = headers(auth.timestampHeader);
        const given = headers(auth.signatureHeader);
        if (timestamp === undefined || timestamp === '') refuse(`missing timestamp: send the ${auth.timestampHeader} header (Unix seconds)`);
        if (given === undefined || given === '') refuse(`missing signature: send the ${auth.signatureHeader} header`);
        if (!/^\d{1,12}$/.test(timestamp)) refuse(`${auth.timestampHeader} must be a Unix time in seconds`);
        if (Math.abs(nowMs / 1000 - Number(timestamp)) > auth.toleranceSeconds) {
          refuse(`timestamp outside the tolerance of ${auth.toleranceSeconds} seconds`);
        }
        const prefix = `${auth.algorithm}=`;
        const hex = (given.toLowerCase().startsWith(prefix) ? given.slice(prefix.length) : given).toLowerCase();
        if (!safeEqual(hex, hmacSignature(auth.algorithm, secret, timestamp, rawBody))) refuse('invalid signature');
      };
    }
  }
}
