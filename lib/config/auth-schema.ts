/**
 * The `auth` schemas of HTTP inbox sources, and the names of the environment variables that hold
 * secrets: a name is never a secret itself, nor a variable the runtime sets for its own use, and
 * a signed timestamp's tolerance is bounded.
 */
import { z } from 'zod';
import { looksLikeSecret } from './looks-like-secret.ts';

const positiveInt = z.number().int().positive();

/** Name of an environment variable that holds a secret; the value itself never lives in YAML. */
export const envName = z
  .string()
  .max(128, 'must be an environment variable name')
  .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name')
  .refine((name) => !looksLikeSecret(name), 'looks like a secret, not the name of an environment variable: put the secret in an environment variable and name that variable here');

/**
 * Variables the runtime sets for its own use (`AWS_REGION`, `AWS_LAMBDA_FUNCTION_NAME`, `_HANDLER`,
 * `PATH`…): public or guessable values, never a webhook secret.
 */
const RUNTIME_ENV = /^(AWS_|LAMBDA_|_|NODE_|POWERTOOLS_|QUEUEBOX_)|^(PATH|HOME|TZ|LANG|LD_LIBRARY_PATH|PWD|USER|SHELL|HOSTNAME|TERM)$/;

/** Name of the environment variable holding a source's secret: not a variable the runtime sets. */
const secretEnvName = envName.refine(
  (name) => !RUNTIME_ENV.test(name),
  'names a variable the runtime sets for its own use (AWS_*, LAMBDA_*, _*, NODE_*, POWERTOOLS_*, QUEUEBOX_*, PATH, TZ…), whose value is not secret: name the variable that holds the source secret',
);

/** Largest accepted clock difference of a signed timestamp: a captured request is refused after it (docs/security.md). */
export const MAX_TOLERANCE_SECONDS = 900;
const toleranceSeconds = positiveInt.max(MAX_TOLERANCE_SECONDS, `must be at most ${MAX_TOLERANCE_SECONDS} seconds: a signed request is replayable for this long`).default(300);

/** A shared-secret HMAC of `${timestamp}.${rawBody}`, the timestamp within `toleranceSeconds`. */
export const hmacAuthSchema = z.strictObject({
  type: z.literal('hmac'),
  /** Environment variable holding the shared secret. */
  secretEnv: secretEnvName,
  algorithm: z.enum(['sha256', 'sha1', 'sha512']).default('sha256'),
  /** Header carrying the hex signature (an optional `sha256=` prefix is accepted). */
  signatureHeader: z.string().min(1).default('x-signature'),
  /** Header carrying the Unix timestamp (seconds) that is signed as `${timestamp}.${body}`. */
  timestampHeader: z.string().min(1).default('x-timestamp'),
  toleranceSeconds,
});

/** `Authorization: Bearer <token>`. */
export const bearerAuthSchema = z.strictObject({
  type: z.literal('bearer'),
  tokenEnv: secretEnvName,
});

/** A key in a header. */
export const apiKeyAuthSchema = z.strictObject({
  type: z.literal('api-key'),
  header: z.string().min(1).default('x-api-key'),
  keyEnv: secretEnvName,
});

/** Stripe's scheme: `Stripe-Signature: t=<unix>,v1=<hex>` over `${t}.${rawBody}` (HMAC-SHA256). */
export const stripeAuthSchema = z.strictObject({
  type: z.literal('stripe'),
  /** Environment variable holding the endpoint's signing secret (`whsec_…`). */
  secretEnv: secretEnvName,
  toleranceSeconds,
});

/** GitHub's scheme: `X-Hub-Signature-256: sha256=<hex>` over the raw body (HMAC-SHA256). */
export const githubAuthSchema = z.strictObject({
  type: z.literal('github'),
  /** Environment variable holding the webhook secret. */
  secretEnv: secretEnvName,
});

/** No authentication: must be written explicitly, and is logged as a warning at every cold start. */
export const noAuthSchema = z.strictObject({ type: z.literal('none') });

/** The `auth` of an inbox source, by `type`. */
export const authSchema = z.discriminatedUnion('type', [hmacAuthSchema, stripeAuthSchema, githubAuthSchema, bearerAuthSchema, apiKeyAuthSchema, noAuthSchema]);
