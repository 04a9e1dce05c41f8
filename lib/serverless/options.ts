/**
 * `custom.queuebox` in a Serverless service: what the plugin adds, and how (every key, its type
 * and its default). Objects are strict: an unknown key is an error naming it
 * (`custom.queuebox.functions.outboxPoller.timout: unknown key`).
 */
import { z } from 'zod';
import { scheduleExpressionProblem } from './schedule-expression.ts';

const schedule = z.string().superRefine((value, ctx) => {
  const problem = scheduleExpressionProblem(value);
  if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
});
/** The retention periods CloudWatch Logs accepts (PutRetentionPolicy). */
export const LOG_RETENTION_DAYS = [1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653] as const;
const timeout = z.number().int().min(1).max(900);
const memorySize = z.number().int().min(128).max(10240);
const reservedConcurrency = z.number().int().min(0);
/** A boolean, or the text `true`/`false` that a `${param:…}` from the command line gives. */
const flag = z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]);
/** A string that may be empty (`${param:x, ''}`): empty means not set. */
const optionalText = z.string().default('');

function scheduled(defaults: { schedule: string; timeout: number; memorySize?: number }) {
  return z
    .strictObject({
      schedule: schedule.default(defaults.schedule),
      timeout: timeout.default(defaults.timeout),
      memorySize: memorySize.optional(),
      reservedConcurrency: reservedConcurrency.optional(),
    })
    .transform((o) => ({ ...o, memorySize: o.memorySize ?? defaults.memorySize }))
    .prefault({});
}

function byHand(defaults: { timeout: number; reservedConcurrency?: number }) {
  return z
    .strictObject({
      timeout: timeout.default(defaults.timeout),
      memorySize: memorySize.optional(),
      reservedConcurrency: reservedConcurrency.optional(),
    })
    .transform((o) => ({ ...o, reservedConcurrency: o.reservedConcurrency ?? defaults.reservedConcurrency }))
    .prefault({});
}

export const pluginOptionsSchema = z.strictObject({
  /** The QueueBox configuration file, relative to the service directory; shipped to every function. */
  config: z.string().min(1).default('queuebox.yml'),
  /** ARN of a Secrets Manager secret holding the connection string (or an RDS secret's JSON). */
  databaseSecretArn: optionalText.refine((v) => v === '' || v.startsWith('arn:'), 'must be a Secrets Manager secret ARN (arn:…)'),
  /** Name of an SSM SecureString holding the connection string (`/queuebox/prod/database-url`). */
  databaseUrlParameter: optionalText.refine((v) => v === '' || v.startsWith('/'), 'must be an SSM parameter name starting with /'),
  /** Package without a database location (offline packaging, CI): the functions would find no database. */
  allowMissingDatabase: flag.default(false),
  /** SSM path of the inbox source secrets, each a SecureString named like its variable. Default `/queuebox/<stage>`. */
  secretsParameterPath: z.string().regex(/^\/[A-Za-z0-9_.\-/]*[A-Za-z0-9_.-]$/, 'must be an SSM path such as /queuebox/prod').optional(),
  /** SNS topic ARN for alarm notifications; empty: alarms without notifications. */
  alarmTopicArn: optionalText.refine((v) => v === '' || v.startsWith('arn:'), 'must be an SNS topic ARN (arn:…)'),
  /** The functions' VPC; default the provider's (`provider.vpc`), if any. */
  vpc: z.strictObject({ securityGroupIds: z.array(z.string().min(1)).min(1), subnetIds: z.array(z.string().min(1)).min(1) }).optional(),
  /** Attach AWSLambdaVPCAccessExecutionRole to the roles; default: true when the functions run in a VPC. */
  vpcAccess: flag.optional(),
  /** Memory of every function not given its own (MB). */
  memorySize: memorySize.default(256),
  /** Retention of the functions' log groups (days); default the provider's, else 30. */
  logRetentionInDays: z
    .number()
    .refine((v) => (LOG_RETENTION_DAYS as readonly number[]).includes(v), `must be one of the periods CloudWatch Logs accepts: ${LOG_RETENTION_DAYS.join(', ')}`)
    .optional(),
  /** Throttling of QueueBox's HTTP routes (only these routes) and their access log. */
  httpApi: z
    .strictObject({
      throttlingRateLimit: z.number().positive().default(100),
      throttlingBurstLimit: z.number().int().positive().default(200),
      /** Give the HTTP API stage an access log (log group `QueueBoxHttpApiAccessLogs`) unless it has one. */
      accessLogs: z.boolean().default(true),
    })
    .prefault({}),
  /** Per function: schedule (scheduled ones), timeout (s), memory (MB), reserved concurrency. */
  functions: z
    .strictObject({
      outboxPoller: scheduled({ schedule: 'rate(1 minute)', timeout: 60, memorySize: 512 }),
      inboxRelay: scheduled({ schedule: 'rate(1 minute)', timeout: 60, memorySize: 512 }),
      reclaim: scheduled({ schedule: 'rate(5 minutes)', timeout: 30 }),
      retention: scheduled({ schedule: 'rate(1 hour)', timeout: 300 }),
      inboxHttp: byHand({ timeout: 10, reservedConcurrency: 10 }),
      inboxSqs: byHand({ timeout: 30, reservedConcurrency: 5 }),
      replay: byHand({ timeout: 120 }),
      migrate: byHand({ timeout: 300 }),
    })
    .prefault({}),
});

/** `custom.queuebox` after validation, every default filled in. */
export type PluginOptions = z.output<typeof pluginOptionsSchema>;

/** Settings of one function after defaults. */
export interface FunctionOptions {
  schedule?: string;
  timeout: number;
  memorySize?: number | undefined;
  reservedConcurrency?: number | undefined;
}

/** Validates `custom.queuebox`; throws an `Error` listing every bad key as `custom.queuebox.<key>: <problem>`. */
export function parsePluginOptions(input: unknown): PluginOptions {
  const result = pluginOptionsSchema.safeParse(input ?? {});
  if (result.success) return result.data;
  const lines = result.error.issues.map((issue) => {
    const path = ['custom', 'queuebox', ...issue.path.map(String)];
    if (issue.code === 'unrecognized_keys') return `${[...path, issue.keys[0] ?? ''].join('.')}: unknown key`;
    return `${path.join('.')}: ${issue.message}`;
  });
  throw new Error(`invalid custom.queuebox:\n  ${lines.join('\n  ')}`);
}

/** The JSON schema osls validates `custom.queuebox` against (editor hints; `parsePluginOptions` is the authority). */
export function pluginOptionsJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(pluginOptionsSchema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  delete schema.$schema;
  return schema;
}
