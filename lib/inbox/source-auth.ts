/**
 * Authentication of HTTP sources (spec §5): `hmac` (signature over `${timestamp}.${rawBody}`
 * with a timestamp tolerance), the vendor presets `stripe` (`Stripe-Signature: t=…,v1=…` over
 * `${t}.${rawBody}`) and `github` (`X-Hub-Signature-256: sha256=…` over the raw body), `bearer`,
 * `api-key`, or `none`.
 *
 * What a signature covers decides what may be trusted: for the signed schemes only the body (and
 * the signed timestamp) is, so the idempotency key comes from the body (`isSigned`), never from a
 * header an attacker could change while replaying a captured request.
 *
 * Secrets come from a `SecretLookup` (lib/runtime/source-secrets.ts): checked when the receiver is
 * built (a missing, blank or short secret is a `ConfigError` naming the key), read again when old
 * and after a refusal. Every comparison is constant-time (`crypto.timingSafeEqual` on
 * equal-length buffers).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { ConfigError } from '../errors.ts';
import type { SecretLookup } from '../runtime/source-secrets.ts';
import type { AuthConfig } from '../config/schema.ts';
import { InboxRejectionError } from './inbox-rejection.ts';

/** Case-insensitive header lookup of one request. */
export type HeaderLookup = (name: string) => string | undefined;

/** Checks one request; rejects with `InboxRejectionError('unauthorized')` when it is refused. */
export type Authenticator = (headers: HeaderLookup, rawBody: Buffer, nowMs: number) => Promise<void>;

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

/** True for the schemes whose signature covers the body: the body is the only trusted part. */
export function isSigned(auth: AuthConfig | undefined): boolean {
  return auth?.type === 'hmac' || auth?.type === 'stripe' || auth?.type === 'github';
}

/** One check with one secret value: true when it verifies; throws for a request malformed whatever the secret. */
type Verifier = (secret: string, headers: HeaderLookup, rawBody: Buffer, nowMs: number) => boolean;

/**
 * Builds the authenticator of source `sourceName`; throws `ConfigError` when its secret is unset,
 * blank or too short. A request that fails with the secret held is checked once more with a
 * freshly read value (`SecretLookup.refreshAfterFailure`, rate-limited), so a rotation is seen
 * at the first request signed with the new secret.
 */
export function createAuthenticator(sourceName: string, auth: AuthConfig | undefined, secrets: SecretLookup): Authenticator {
  const key = `inbox.sources.${sourceName}.auth`;
  if (auth === undefined) throw new ConfigError([{ key, message: 'is required for an http source' }]);
  if (auth.type === 'none') return () => Promise.resolve();
  const [name, verify, refusal] = verifierOf(auth);
  secrets.require(name, `${key}.${auth.type === 'bearer' ? 'tokenEnv' : auth.type === 'api-key' ? 'keyEnv' : 'secretEnv'}`);
  return async (headers, rawBody, nowMs) => {
    const secret = await secrets.current(name);
    if (verify(secret, headers, rawBody, nowMs)) return;
    const fresh = await secrets.refreshAfterFailure(name, secret);
    if (fresh !== undefined && verify(fresh, headers, rawBody, nowMs)) return;
    refuse(refusal);
  };
}

function verifierOf(auth: Exclude<AuthConfig, { type: 'none' }>): [secretName: string, verify: Verifier, refusal: string] {
  switch (auth.type) {
    case 'bearer':
      return [
        auth.tokenEnv,
        (token, headers) => {
          const match = /^Bearer\s+(.+)$/i.exec(headers('authorization') ?? '');
          if (!match) refuse('missing bearer token: send Authorization: Bearer <token>');
          return safeEqual(match[1]!.trim(), token);
        },
        'invalid bearer token',
      ];
    case 'api-key':
      return [
        auth.keyEnv,
        (apiKey, headers) => {
          const given = headers(auth.header);
          if (given === undefined || given === '') refuse(`missing API key: send the ${auth.header} header`);
          return safeEqual(given, apiKey);
        },
        'invalid API key',
      ];
    case 'hmac':
      return [
        auth.secretEnv,
        (secret, headers, rawBody, nowMs) => {
          const timestamp = headers(auth.timestampHeader);
          const given = headers(auth.signatureHeader);
          if (timestamp === undefined || timestamp === '') refuse(`missing timestamp: send the ${auth.timestampHeader} header (Unix seconds)`);
          if (given === undefined || given === '') refuse(`missing signature: send the ${auth.signatureHeader} header`);
          if (!/^\d{1,12}$/.test(timestamp)) refuse(`${auth.timestampHeader} must be a Unix time in seconds`);
          if (Math.abs(nowMs / 1000 - Number(timestamp)) > auth.toleranceSeconds) refuse(`timestamp outside the tolerance of ${auth.toleranceSeconds} seconds`);
          const prefix = `${auth.algorithm}=`;
          const hex = (given.toLowerCase().startsWith(prefix) ? given.slice(prefix.length) : given).toLowerCase();
          return safeEqual(hex, hmacSignature(auth.algorithm, secret, timestamp, rawBody));
        },
        'invalid signature',
      ];
    case 'stripe':
      return [
        auth.secretEnv,
        (secret, headers, rawBody, nowMs) => {
          const header = headers('stripe-signature');
          if (header === undefined || header === '') refuse('missing signature: send the Stripe-Signature header');
          const parts = header.split(',').map((part) => part.trim().split('='));
          const timestamps = parts.filter(([name]) => name === 't').map(([, value]) => value ?? '');
          const signatures = parts.filter(([name, value]) => name === 'v1' && value !== undefined && value !== '').map(([, value]) => value!.toLowerCase());
          if (timestamps.length !== 1 || !/^\d{1,12}$/.test(timestamps[0]!)) refuse('Stripe-Signature must carry one t=<Unix seconds>');
          if (signatures.length === 0) refuse('Stripe-Signature carries no v1 signature');
          const timestamp = timestamps[0]!;
          if (Math.abs(nowMs / 1000 - Number(timestamp)) > auth.toleranceSeconds) refuse(`timestamp outside the tolerance of ${auth.toleranceSeconds} seconds`);
          const expected = hmacSignature('sha256', secret, timestamp, rawBody);
          // Every v1 is compared (Stripe sends one per active secret while a secret is rolled).
          let valid = false;
          for (const given of signatures) valid = safeEqual(given, expected) || valid;
          return valid;
        },
        'invalid signature',
      ];
    case 'github':
      return [
        auth.secretEnv,
        (secret, headers, rawBody) => {
          const given = headers('x-hub-signature-256');
          if (given === undefined || given === '') refuse('missing signature: send the X-Hub-Signature-256 header');
          if (!given.startsWith('sha256=')) refuse('X-Hub-Signature-256 must be sha256=<hex>');
          return safeEqual(given.slice('sha256='.length).toLowerCase(), createHmac('sha256', secret).update(rawBody).digest('hex'));
        },
        'invalid signature',
      ];
  }
}
