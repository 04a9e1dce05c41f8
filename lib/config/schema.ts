/**
 * The QueueBox configuration schema: every key, its type, its default and its limits.
 *
 * This is the single source of truth for configuration. `docs/configuration.md` is tested
 * against it, and `loadConfig` validates the YAML file plus `QUEUEBOX_*` overrides with it.
 * Objects are strict: an unknown key is an error that names the key, and so is a key that does not
 * apply to an inbox source's `type` (`path` on an sqs source, `queueName` on an http source).
 * Every duration in ms is at most `MAX_TIMER_MS`: it reaches a timer or a database timeout.
 */
import { z } from 'zod';
import { authSchema, envName } from './auth-schema.ts';
import { crossCheckConfig } from './cross-check-config.ts';
import { IDENTIFIER_PATTERN } from './identifier.ts';
import { MAX_TIMER_MS } from '../runtime/timer-limit.ts';

export { authSchema, MAX_TOLERANCE_SECONDS } from './auth-schema.ts';

export { IDENTIFIER_PATTERN };

const identifier = z
  .string()
  .regex(IDENTIFIER_PATTERN, 'must be a lower-case SQL identifier: letters, digits and _ (at most 63), not starting with a digit');

/**
 * Why `schema` cannot hold QueueBox's tables on `type`, or undefined: PostgreSQL refuses to create
 * a schema named `pg_*` (`pg_catalog`, `pg_temp`, `pg_toast` are its own) and keeps its catalog
 * views in `information_schema`; SQL Server keeps its own in `sys` and `INFORMATION_SCHEMA`.
 */
export function reservedSchemaProblem(schema: string, type: 'postgres' | 'sqlserver'): string | undefined {
  if (type === 'postgres' && (schema.startsWith('pg_') || schema === 'information_schema')) {
    return `is "${schema}", a schema name PostgreSQL reserves (pg_* for its own schemas, information_schema for its catalog views): choose another, such as queuebox`;
  }
  if (type === 'sqlserver' && (schema === 'sys' || schema === 'information_schema')) {
    return `is "${schema}", a schema SQL Server reserves for its catalog views: choose another, such as dbo or queuebox`;
  }
  return undefined;
}

const URL_SCHEME = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//;

/** True when `url` parses as pg parses it (pg-connection-string: spaces encoded, an empty host after `@` allowed). */
function parsesAsPgUrl(url: string): boolean {
  const text = / |%[^a-f0-9]|%[a-f0-9][^a-f0-9]/i.test(url) ? encodeURI(url).replace(/%25(\d\d)/g, '%$1') : url;
  return URL.canParse(text) || URL.canParse(text.replace('@/', '@___DUMMY___/'));
}

/**
 * Why `url` is not a connection string of `type`, or undefined. Never quotes the URL (it may hold a
 * password): at most its scheme. PostgreSQL takes what `pg` connects with: a `postgres://` or
 * `postgresql://` URL (an empty host uses the socket or `?host=`), a `socket:` URL, or a socket
 * directory path; SQL Server an `mssql://` or `sqlserver://` URL or an ADO connection string
 * (checked when the pool is made).
 */
export function databaseUrlProblem(url: string, type: 'postgres' | 'sqlserver'): string | undefined {
  if (url.trim() !== url) return 'starts or ends with white space (a space or line break copied with it?): remove it';
  const scheme = URL_SCHEME.exec(url)?.[1]?.toLowerCase();
  const invalid = 'is not a valid URL: check it, and percent-encode @ : / ? # in the user name and password (%40 %3A %2F %3F %23)';
  if (type === 'sqlserver') {
    if (scheme === undefined) return undefined;
    if (scheme === 'mssql' || scheme === 'sqlserver') return URL.canParse(url) ? undefined : invalid;
    return `is a ${scheme}:// URL, but database.type is sqlserver: give an mssql://user:password@host:port/database URL or an ADO connection string (Server=…;Database=…)`;
  }
  if (url.startsWith('/') || /^socket:/i.test(url)) return undefined;
  if (scheme === 'postgres' || scheme === 'postgresql') return parsesAsPgUrl(url) ? undefined : invalid;
  if (scheme === 'mssql' || scheme === 'sqlserver') return `is a ${scheme}:// URL (SQL Server), but database.type is postgres: set database.type: sqlserver, or give a postgres:// URL`;
  if (scheme !== undefined) return `is a ${scheme}:// URL: a PostgreSQL URL starts with postgres:// or postgresql:// (postgres://user:password@host:5432/database)`;
  return 'is not a PostgreSQL connection URL: it must start with postgres:// or postgresql:// (postgres://user:password@host:5432/database)';
}

const positiveInt = z.number().int().positive();
const nonNegativeInt = z.number().int().nonnegative();
const TIMER_LIMIT = `must be at most ${MAX_TIMER_MS} ms (about 24.8 days): the longest delay a timer or a database timeout takes`;
/** A duration in ms (every `…Ms` key): it reaches a timer or a database timeout, so at most `MAX_TIMER_MS`. */
const durationMs = nonNegativeInt.max(MAX_TIMER_MS, TIMER_LIMIT);
/** A duration in ms that must be positive. */
const positiveMs = positiveInt.max(MAX_TIMER_MS, TIMER_LIMIT);
export const databaseSchema = z
  .strictObject({
    type: z.enum(['postgres', 'sqlserver']).default('postgres'),
    /**
     * Connection string: `postgres://` or `postgresql://` (`databaseUrlProblem`). For SQL Server:
     * `mssql://user:pass@host:1433/db?encrypt=true`. Not together with `urlEnv`.
     */
    url: z.string().min(1).optional(),
    /** Name of an environment variable holding the connection string (e.g. from SSM/Secrets Manager). Not together with `url`. */
    urlEnv: envName.optional(),
    /** Schema holding QueueBox's tables. Default `public` (PostgreSQL) or `dbo` (SQL Server); not one the database reserves (`reservedSchemaProblem`). */
    schema: identifier.optional(),
    /** Connections per container. Lambda: keep 1–2; behind RDS Proxy the proxy pools. */
    poolMax: positiveInt.max(50).default(2),
    /** Upper bound for any statement; a pass also bounds it by the time left in the invocation. */
    statementTimeoutMs: positiveMs.default(30000),
    /** PostgreSQL `idle_in_transaction_session_timeout`. */
    idleInTransactionTimeoutMs: positiveMs.default(60000),
    /**
     * PostgreSQL: `queuebox migrate` creates a PL/pgSQL function for each outbox claim statement
     * (at `outbox.batchSize`), and claims call it: planned once per server connection instead of
     * at every batch (about 0.7–0.9 ms of database CPU per claim), with no session state, so it
     * works through RDS Proxy and any PgBouncer. A claim whose function is missing sends its
     * statement (and tries the function again 5 minutes later). `false`: `migrate` drops them
     * and claims send their statements.
     */
    claimFunctions: z.boolean().default(true),
    /**
     * PostgreSQL: send the claim statements as named prepared statements, planned once per
     * connection instead of at every batch (the relay and pull claims too; the outbox claims
     * gain no more than with `claimFunctions`). Only on a direct connection or PgBouncer 1.21+
     * with `max_prepared_statements`: RDS Proxy pins such sessions and older PgBouncer in
     * transaction mode fails them. Off by default.
     */
    preparedStatements: z.boolean().default(false),
    /** SQL Server driver request timeout; must exceed the 10 s applock wait (spec §8). */
    requestTimeoutMs: positiveMs.min(30000).default(30000),
    connectTimeoutMs: positiveMs.default(10000),
  })
  .prefault({});

export const tablesSchema = z
  .strictObject({
    outbox: identifier.default('outbox'),
    inbox: identifier.default('inbox'),
    /** Small table of shared throttles (reclaim gates) kept across invocations. */
    maintenance: identifier.default('queuebox_maintenance'),
  })
  .prefault({});

/** Default of `destinations.<name>.callTimeoutMs`. */
export const DEFAULT_CALL_TIMEOUT_MS = 10_000;
/** Shortest `callTimeoutMs`: a healthy call on a cold connection (TLS handshake) can take about that long. */
export const MIN_CALL_TIMEOUT_MS = 100;
/** Longest `callTimeoutMs`: Lambda's longest invocation (900 s). */
export const MAX_CALL_TIMEOUT_MS = 900_000;
const CALL_TIMEOUT_RULE = `must be a whole number of ms from ${MIN_CALL_TIMEOUT_MS} to ${MAX_CALL_TIMEOUT_MS} (900 s, Lambda's longest invocation)`;

const awsCallSettings = {
  /** AWS region of the destination; defaults to the Lambda's `AWS_REGION`. It enters IAM ARNs, so only a region name. */
  region: z.string().regex(/^[a-z]{2}(-[a-z]+)+-\d{1,2}$/, 'must be an AWS region name such as eu-west-1').optional(),
  /** Endpoint override (local emulators, VPC endpoints). */
  endpoint: z.string().url().optional(),
  /**
   * The longest one call to the destination (`SendMessageBatch`, `PutEvents`, the SDK's retries
   * included) may take before it is aborted and its rows retried: the SDK clients have no request
   * timeout, and a claimed batch is settled once all its calls answered, so a peer that accepts
   * the connection and never answers would hold every row and key of the batch until the deadline.
   */
  callTimeoutMs: z
    .number()
    .int(CALL_TIMEOUT_RULE)
    .min(MIN_CALL_TIMEOUT_MS, CALL_TIMEOUT_RULE)
    .max(MAX_CALL_TIMEOUT_MS, CALL_TIMEOUT_RULE)
    .default(DEFAULT_CALL_TIMEOUT_MS),
};

/** Whether a URL (already known to parse) names a queue: a path ending in a name, nothing after it. */
function endsInQueueName(url: string): boolean {
  if (url.endsWith('/') || url.includes('?') || url.includes('#')) return false;
  let path: string;
  try {
    path = new URL(url).pathname;
  } catch {
    return true; // `url()` says what is wrong
  }
  return path.split('/').length >= 3;
}

/** `destinations.<name>.maxRequestBytes` of an EventBridge destination: the default (256 KB, the `PutEvents` reference) and its range. */
export const DEFAULT_EVENTBRIDGE_REQUEST_BYTES = 262_144;
export const MIN_EVENTBRIDGE_REQUEST_BYTES = 16_384;
export const MAX_EVENTBRIDGE_REQUEST_BYTES = 1_048_576;
const EVENTBRIDGE_REQUEST_RULE = `must be a whole number of bytes from ${MIN_EVENTBRIDGE_REQUEST_BYTES} to ${MAX_EVENTBRIDGE_REQUEST_BYTES} (1 MiB)`;

export const sqsDestinationSchema = z.strictObject({
  type: z.literal('sqs'),
  /** Full queue URL, ending in the queue's name; a name ending in `.fifo` is a FIFO queue. */
  queueUrl: z
    .string()
    .url()
    // SQS knows no queue by a URL with a trailing slash, a query or a fragment, or without a path
    // (QueueDoesNotExist on every call): an operator's typo refused here, not found as dead rows.
    .refine(
      endsInQueueName,
      'must end in the queue name, with no trailing slash, query or fragment (https://sqs.<region>.amazonaws.com/<account>/<queue name>)',
    ),
  ...awsCallSettings,
});

export const eventBridgeDestinationSchema = z.strictObject({
  type: z.literal('eventbridge'),
  /** Bus name or ARN. */
  eventBusName: z.string().min(1),
  /** EventBridge `Source` of every entry; not in the `aws.` namespace, which PutEvents refuses for custom events. */
  source: z
    .string()
    .min(1)
    .max(256)
    .refine((source) => !source.startsWith('aws.'), 'must not start with "aws.": EventBridge reserves that prefix for AWS services and refuses it in PutEvents'),
  /**
   * The entries of one `PutEvents` call add up to less than this, in bytes as EventBridge counts
   * them; an entry this large or larger is dead at once. The `PutEvents` reference says 256 KB;
   * AWS announced event payloads up to 1 MB in January 2026: raise it once your bus accepts them.
   */
  maxRequestBytes: z
    .number()
    .int(EVENTBRIDGE_REQUEST_RULE)
    .min(MIN_EVENTBRIDGE_REQUEST_BYTES, EVENTBRIDGE_REQUEST_RULE)
    .max(MAX_EVENTBRIDGE_REQUEST_BYTES, EVENTBRIDGE_REQUEST_RULE)
    .default(DEFAULT_EVENTBRIDGE_REQUEST_BYTES),
  ...awsCallSettings,
});

export const destinationSchema = z.discriminatedUnion('type', [sqsDestinationSchema, eventBridgeDestinationSchema]);

export const routeSchema = z.strictObject({
  /** Anchored pattern: `*` is one dot-free segment, `**` any text. */
  topicPattern: z.string().min(1).max(255),
  /** Name of an entry in `destinations`. */
  destination: z.string().min(1),
});

/**
 * Scale-out by backlog (`lib/runtime/scale-out.ts`): a scheduled pass that sees more due rows than
 * it can drain before its deadline starts more passes of its function (asynchronous invokes).
 */
export const scaleOutSchema = z
  .strictObject({
    /** Passes of the function at once, counting the scheduled pass that starts the others; 1 turns scale-out off. */
    maxConcurrentPasses: positiveInt.max(64).default(1),
  })
  .prefault({});

export const outboxSchema = z
  .strictObject({
    batchSize: positiveInt.max(1000).default(100),
    /**
     * The most rows a claim may grow to: a pass starts at `batchSize`, doubles its claim after each
     * claim that came back full and halves it (never below `batchSize`) after one that came back
     * less than half full (not after one sent while the pass's own batches were still publishing:
     * they may hold the keys it missed), so a keyless or many-key backlog moves in large claims and a table held
     * by a few keys in small ones. Equal to `batchSize`: every claim takes `batchSize`.
     */
    maxBatchSize: positiveInt.max(1000).default(1000),
    /** Destination calls in flight at once within one invocation. */
    concurrency: positiveInt.max(64).default(8),
    /**
     * Rows of one key a claim may hold: the head of the key and the next rows of that key in
     * `sequence` order, all due and pending. They are published one after another, one row of the
     * key per destination call. Unset: 10 on PostgreSQL (`DEFAULT_ROWS_PER_KEY`), 1 on SQL Server,
     * which supports only 1 (`outboxRowsPerKey`); 1 takes only the head.
     */
    rowsPerKey: positiveInt.max(100).optional(),
    /** Pause after a claim that found nothing (ms); it doubles with each further empty claim, up to `maxPollIntervalMs`. */
    pollIntervalMs: durationMs.default(100),
    /** Longest pause between claims of an idle pass (ms); never below `pollIntervalMs`. */
    maxPollIntervalMs: durationMs.default(1000),
    retryBaseDelayMs: positiveMs.default(1000),
    /** Default `max_attempts` for rows enqueued through the API: deliveries, the first included. */
    maxAttempts: positiveInt.max(1000).default(5),
    /** Lease duration; also the reclaim throttle base (reclaim runs at most every claimTimeoutMs / 5). */
    claimTimeoutMs: positiveMs.min(1000).default(300000),
    shutdownTimeoutMs: durationMs.default(30000),
    routes: z.array(routeSchema).default([]),
    scaleOut: scaleOutSchema,
  })
  .prefault({});

export const sourceSchema = z.strictObject({
  type: z.enum(['http', 'sqs']),
  /** HTTP path below `inbox.basePath`, e.g. `/stripe`. Required for `http` sources. */
  path: z.string().regex(/^\/[A-Za-z0-9._~\-/]*$/, 'must start with / and contain only URL path characters').optional(),
  /**
   * SQS sources only: name of the queue (last part of the event source ARN) this source receives
   * from. Default: the source name.
   */
  queueName: z.string().regex(/^[A-Za-z0-9_-]{1,80}(\.fifo)?$/, 'must be an SQS queue name').optional(),
  consumption: z.enum(['push', 'pull']).default('push'),
  /** Required for `http` sources (`type: none` to accept anyone); not allowed for `sqs` sources (IAM decides). */
  auth: authSchema.optional(),
  /** JSONPath into the body for the idempotency key (unsigned http sources: when `X-Idempotency-Key` is absent). */
  idempotencyKeyPath: z.string().min(1).optional(),
  /** HTTP sources: header carrying the sender's delivery id, used as the idempotency key (e.g. `X-GitHub-Delivery`). */
  idempotencyKeyHeader: z
    .string()
    .regex(/^[A-Za-z0-9-]{1,64}$/, 'must be an HTTP header name')
    .optional(),
  /** `none`: store every delivery (no deduplication); `body-digest`: identical bodies are one message. */
  idempotency: z.enum(['none', 'body-digest']).optional(),
  eventTypePath: z.string().min(1).optional(),
  aggregateIdPath: z.string().min(1).optional(),
  correlationIdPath: z.string().min(1).optional(),
  /** JSONPath to a delay in milliseconds before the message becomes due. */
  delayPath: z.string().min(1).optional(),
  /** Overrides `inbox.topicTemplate` for this source. */
  topicTemplate: z.string().min(1).optional(),
});

export const inboxSchema = z
  .strictObject({
    basePath: z.string().regex(/^(\/[A-Za-z0-9._~\-]+)*$/, 'must be empty or start with / and not end with /').default('/inbox'),
    maxBodyBytes: positiveInt.default(1048576),
    /** Topic of relayed outbox rows; `{{ source }}` and `{{ eventType }}` are replaced. */
    topicTemplate: z.string().min(1).default('{{ source }}.{{ eventType }}'),
    relay: z
      .strictObject({
        batchSize: positiveInt.max(1000).default(100),
        concurrency: positiveInt.max(64).default(4),
        /** Pause after a claim that found nothing (ms); it doubles with each further empty claim, up to `maxPollIntervalMs`. */
        pollIntervalMs: durationMs.default(100),
        /** Longest pause between claims of an idle pass (ms); never below `pollIntervalMs`. */
        maxPollIntervalMs: durationMs.default(1000),
        claimTimeoutMs: positiveMs.min(1000).default(300000),
        shutdownTimeoutMs: durationMs.default(30000),
        retryBaseDelayMs: positiveMs.default(1000),
        /** Relay forwards (the first included) and `max_attempts` (deliveries) of relayed outbox rows; unset: `outbox.maxAttempts`. */
        maxAttempts: positiveInt.max(1000).optional(),
        /** Key of relayed outbox rows: `<source>:<aggregateId>` (a digest when longer than 128 characters), or the aggregate id alone. */
        outboxKey: z.enum(['source-and-aggregate', 'aggregate']).default('source-and-aggregate'),
        scaleOut: scaleOutSchema,
      })
      .prefault({}),
    sources: z.record(z.string().regex(/^[a-z0-9][a-z0-9_-]{0,62}$/, 'source names are 1 to 63 lower-case letters, digits, - and _, starting with a letter or digit'), sourceSchema).prefault({}),
  })
  .prefault({});

export const pullSchema = z
  .strictObject({
    batchSize: positiveInt.max(1000).default(10),
    leaseMs: positiveMs.min(1000).default(30000),
    concurrency: positiveInt.max(64).default(1),
    pollMs: durationMs.default(1000),
    retry: z
      .strictObject({
        maxAttempts: positiveInt.default(5),
        baseDelayMs: positiveMs.default(1000),
        maxDelayMs: positiveMs.default(300000),
        jitter: z.number().min(0).max(1).default(0.2),
      })
      .prefault({}),
  })
  .prefault({});

/**
 * Largest retention age or horizon (10 years): far more and the cutoff cannot be computed
 * (SQL Server adds the seconds as an INT, 68 years; PostgreSQL timestamps start at 4713 BC).
 */
export const MAX_RETENTION_HOURS = 87_600;
const retentionHours = positiveInt.max(MAX_RETENTION_HOURS, `must be at most ${MAX_RETENTION_HOURS} hours (10 years)`);

export const retentionSchema = z
  .strictObject({
    /** Off by default: nothing is deleted until an operator turns it on. */
    enabled: z.boolean().default(false),
    /** Outbox `sent` rows older than this (by `updated_at`) are deleted. */
    outboxSentAfterHours: retentionHours.default(168),
    /** Outbox `dead` rows older than this (by `updated_at`) are deleted. */
    outboxDeadAfterHours: retentionHours.default(720),
    /** Inbox `processed` rows older than this (by `created_at`) are deleted. */
    inboxProcessedAfterHours: retentionHours.default(168),
    /** Inbox `dead` rows older than this (by `created_at`) are deleted. */
    inboxDeadAfterHours: retentionHours.default(720),
    /** Rows per DELETE statement. */
    batchSize: positiveInt.max(50000).default(1000),
    /**
     * Inbox rows of sources whose replay protection rests on the stored key alone (GitHub: no
     * signed timestamp) are kept at least this long, whatever the two inbox ages say.
     */
    inboxReplayHorizonHours: retentionHours.default(720),
  })
  .prefault({});

export const secretsSchema = z
  .strictObject({
    /** A secret read from Secrets Manager or SSM is read again once it is this old. */
    maxAgeSeconds: positiveInt.max(3600).default(300),
    /** A refused signature or database login reads the secret again at most this often, per secret. */
    minRefetchSeconds: positiveInt.max(3600).default(30),
  })
  .prefault({});

/** Powertools Logger levels, most verbose first. */
export const LOG_LEVELS = ['TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR', 'CRITICAL', 'SILENT'] as const;

/** Printable ASCII (space to `~`): CloudWatch takes no control characters and nothing beyond ASCII in a namespace or dimension value. */
const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;
/**
 * A name CloudWatch takes as a metric namespace or dimension value (PutMetricData): 1 to 255
 * printable ASCII characters, not all spaces. Refused here because CloudWatch drops what it refuses
 * (the metrics are missing, the alarms watch nothing) instead of failing the function.
 */
const cloudWatchName = z
  .string()
  .max(255)
  .regex(PRINTABLE_ASCII, 'must be printable ASCII (letters, digits, spaces and punctuation): CloudWatch refuses control characters and non-ASCII ones')
  .refine((value) => value.trim() !== '', 'must have at least one character other than a space')
  // The dashboard's metric searches and log queries quote these names: SEARCH('{namespace,…}
  // service="…"') and Logs Insights `service = "…"`, where such a character ends the name early.
  .refine((value) => !/["'{},\\]/.test(value), 'must not contain " \' { } , or \\: the dashboard\'s metric searches and log queries quote the name, and such a character would break them');

export const observabilitySchema = z
  .strictObject({
    /** CloudWatch metrics namespace; `AWS/` is reserved for AWS services and a namespace may not start with `:` (PutMetricData). */
    namespace: cloudWatchName
      .refine((value) => !value.startsWith(':'), 'must not start with ":" (CloudWatch refuses such a namespace)')
      .refine((value) => !value.startsWith('AWS/'), 'must not start with "AWS/": reserved for AWS services, CloudWatch refuses it')
      .default('QueueBox'),
    /** `service` dimension and logger service name. */
    serviceName: cloudWatchName.default('queuebox'),
    /** Log level; `POWERTOOLS_LOG_LEVEL` overrides the file, `QUEUEBOX_OBSERVABILITY__LOG_LEVEL` overrides both. */
    logLevel: z.enum(LOG_LEVELS).default('INFO'),
    /** AWS X-Ray tracing through Powertools Tracer (the deployed functions get active tracing). */
    tracing: z.boolean().default(false),
  })
  .prefault({});

/**
 * The largest `lambda.deadlineMarginMs` plus one: Lambda's longest timeout (900 s) less the 1 s
 * before the deadline in which a poller or relay pass still claims (`MIN_CLAIM_WINDOW_MS`,
 * `MIN_LEASE_MS`). With a margin this large no invocation claims anything; packaging also refuses a
 * margin too large for the functions' own timeouts.
 */
const DEADLINE_MARGIN_LIMIT_MS = 899_000;

/**
 * The least `lambda.deadlineMarginMs`: the margin is all the time a poller or relay pass stopped at
 * its deadline has to write the settles of the batches that answered (one fenced write each, sent
 * at once), and that `inboxHttp`, `reclaim`, `retention` and `replay` keep back to answer after a
 * cancelled statement. One second, the time `MIN_LEASE_MS` allows a statement to return in. With
 * less (0: none) those settles are cut off by the invocation's end: their rows, already delivered,
 * stay `processing` until the reclaim and are delivered again.
 */
const DEADLINE_MARGIN_MIN_MS = 1000;

export const lambdaSchema = z
  .strictObject({
    /** Time kept back from `getRemainingTimeInMillis()` for settling and returning (ms). */
    deadlineMarginMs: nonNegativeInt
      .min(DEADLINE_MARGIN_MIN_MS, `must be at least ${DEADLINE_MARGIN_MIN_MS} ms: the time a pass stopped at its deadline has to write the settles of what it delivered (one fenced write) before the invocation ends`)
      .lt(DEADLINE_MARGIN_LIMIT_MS, `must be less than ${DEADLINE_MARGIN_LIMIT_MS} ms: Lambda's longest timeout (900 s) less the 1 s a poller or relay pass needs to claim`)
      .default(5000),
  })
  .prefault({});

export const configSchema = z
  .strictObject({
    database: databaseSchema,
    tables: tablesSchema,
    destinations: z.record(z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'destination names are 1 to 64 letters, digits, - and _'), destinationSchema).prefault({}),
    outbox: outboxSchema,
    inbox: inboxSchema,
    pull: pullSchema,
    retention: retentionSchema,
    secrets: secretsSchema,
    observability: observabilitySchema,
    lambda: lambdaSchema,
  })
  .superRefine((config, ctx) => {
    config.outbox.routes.forEach((route, index) => {
      if (!Object.hasOwn(config.destinations, route.destination)) {
        ctx.addIssue({
          code: 'custom',
          path: ['outbox', 'routes', index, 'destination'],
          message: `names destination "${route.destination}", which is not defined under destinations`,
        });
      }
    });
    for (const [name, source] of Object.entries(config.inbox.sources)) {
      if (source.type === 'http' && source.path === undefined) {
        ctx.addIssue({ code: 'custom', path: ['inbox', 'sources', name, 'path'], message: 'is required for an http source' });
      }
      if (source.type === 'sqs' && source.auth !== undefined && source.auth.type !== 'none') {
        ctx.addIssue({ code: 'custom', path: ['inbox', 'sources', name, 'auth'], message: 'is only for http sources; SQS access is controlled by IAM' });
      }
      if (source.type === 'sqs' && source.path !== undefined) {
        ctx.addIssue({ code: 'custom', path: ['inbox', 'sources', name, 'path'], message: 'is only for http sources: an sqs source receives from its queue (queueName, default the source name)' });
      }
      if (source.type === 'http' && source.queueName !== undefined) {
        ctx.addIssue({ code: 'custom', path: ['inbox', 'sources', name, 'queueName'], message: `is only for sqs sources: an http source receives POST ${config.inbox.basePath}${source.path ?? '<path>'}` });
      }
    }
    const database = config.database;
    const schemaProblem = database.schema === undefined ? undefined : reservedSchemaProblem(database.schema, database.type);
    if (schemaProblem !== undefined) ctx.addIssue({ code: 'custom', path: ['database', 'schema'], message: schemaProblem });
    if (database.url !== undefined && database.urlEnv !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['database', 'url'],
        message: 'is set together with database.urlEnv: set one of them (url is the connection string itself, urlEnv the name of the variable that holds it)',
      });
    }
    const urlProblem = database.url === undefined ? undefined : databaseUrlProblem(database.url, database.type);
    if (urlProblem !== undefined) ctx.addIssue({ code: 'custom', path: ['database', 'url'], message: urlProblem });
    for (const issue of crossCheckConfig(config)) ctx.addIssue({ code: 'custom', ...issue });
    if (config.database.type === 'sqlserver' && (config.outbox.rowsPerKey ?? 1) > 1) {
      ctx.addIssue({
        code: 'custom',
        path: ['outbox', 'rowsPerKey'],
        message: `is ${config.outbox.rowsPerKey}, but more than one row per key in a claim is not supported on SQL Server yet: remove it or set it to 1`,
      });
    }
    if (config.outbox.maxBatchSize < config.outbox.batchSize) {
      ctx.addIssue({
        code: 'custom',
        path: ['outbox', 'maxBatchSize'],
        message: `is ${config.outbox.maxBatchSize}, below outbox.batchSize (${config.outbox.batchSize}): claims start at batchSize and grow up to maxBatchSize; set it to ${config.outbox.batchSize} or more`,
      });
    }
    for (const [path, polls] of [
      [['outbox'], config.outbox],
      [['inbox', 'relay'], config.inbox.relay],
    ] as const) {
      if (polls.maxPollIntervalMs < polls.pollIntervalMs) {
        ctx.addIssue({
          code: 'custom',
          path: [...path, 'maxPollIntervalMs'],
          message: `is ${polls.maxPollIntervalMs}, below ${path.join('.')}.pollIntervalMs (${polls.pollIntervalMs}): the pause after an empty claim starts at pollIntervalMs and doubles up to maxPollIntervalMs; set it to ${polls.pollIntervalMs} or more`,
        });
      }
    }
    const tables = [config.tables.outbox, config.tables.inbox, config.tables.maintenance];
    if (new Set(tables).size !== tables.length) {
      ctx.addIssue({ code: 'custom', path: ['tables'], message: 'outbox, inbox and maintenance must be different tables' });
    }
  });

/** Configuration as written by the operator (before defaults). */
export type ConfigInput = z.input<typeof configSchema>;
/** Fully validated configuration with every default applied. */
export type QueueBoxConfig = z.output<typeof configSchema>;
export type DestinationConfig = z.output<typeof destinationSchema>;
export type SqsDestinationConfig = z.output<typeof sqsDestinationSchema>;
export type EventBridgeDestinationConfig = z.output<typeof eventBridgeDestinationSchema>;
export type RouteConfig = z.output<typeof routeSchema>;
export type SourceConfig = z.output<typeof sourceSchema>;
export type AuthConfig = z.output<typeof authSchema>;

/**
 * Default of `outbox.rowsPerKey` on PostgreSQL: 10, chosen from `npm run bench`
 * (docs/performance.md, "Several rows of a key per claim"): a small hot-key table moves 4–6×
 * faster than at 1, 100 keys about 1.3×, keyless rows and 1,000 or 10,000 keys within 5 %. The order of a key
 * holds either way: one holder per key, a key's rows published one after another, the rest of the
 * key released unpublished at its first failure (docs/claims-and-leases.md). SQL Server claims
 * take the head of a key only (1).
 */
export const DEFAULT_ROWS_PER_KEY = 10;

/** The rows of one key a claim may hold: `outbox.rowsPerKey`, else 1 on SQL Server and `DEFAULT_ROWS_PER_KEY` (10) on PostgreSQL. */
export function outboxRowsPerKey(config: { outbox?: { rowsPerKey?: number | undefined } | undefined; database: { type?: QueueBoxConfig['database']['type'] } }): number {
  return config.outbox?.rowsPerKey ?? (config.database.type === 'sqlserver' ? 1 : DEFAULT_ROWS_PER_KEY);
}
