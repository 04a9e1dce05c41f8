/**
 * Build-time truth: what the plugin refuses to package, and what it warns about, for one
 * configuration and `custom.queuebox`. Pure, so each rule is tested without packaging.
 */
import { MIN_TIME_TO_CLAIM_MS } from '../claims/lease.ts';
import type { QueueBoxConfig } from '../config/schema.ts';
import type { PluginOptions } from './options.ts';

/** Why this stage must not be packaged, or `undefined` when it may. */
export function deployRefusal(options: PluginOptions, config: QueueBoxConfig, stage: string): string | undefined {
  if (config.database.url !== undefined) {
    return `${options.config} sets database.url: every function package would carry the connection string (and its password). Remove it, and set custom.queuebox.databaseSecretArn or custom.queuebox.databaseUrlParameter (or database.urlEnv naming a variable the functions get)`;
  }
  const urlEnvRefusal = storedUrlWithOtherEnv(options, config);
  if (urlEnvRefusal !== undefined) return urlEnvRefusal;
  if (!hasDatabaseLocation(options, config) && !options.allowMissingDatabase) {
    return `stage ${stage} has no database location: set custom.queuebox.databaseSecretArn (a Secrets Manager secret) or custom.queuebox.databaseUrlParameter (an SSM SecureString), or database.urlEnv in ${options.config} naming a variable of provider.environment, or custom.queuebox.allowMissingDatabase: true to package without one (offline checks only: the functions would find no database)`;
  }
  const tooShort = timeoutRefusals(options, config);
  return tooShort.length > 0 ? tooShort.join('\n') : undefined;
}

/**
 * The connection string read from a secret or parameter reaches the configuration as
 * `QUEUEBOX_DATABASE_URL` (`withDatabaseUrl`, lib/runtime/secrets.ts); `database.urlEnv` naming
 * another variable makes the configuration read that one instead, which nothing sets: every
 * function would fail at cold start.
 */
function storedUrlWithOtherEnv(options: PluginOptions, config: QueueBoxConfig): string | undefined {
  const urlEnv = config.database.urlEnv;
  if (urlEnv === undefined || urlEnv === FETCHED_URL_ENV) return undefined;
  const stores = [
    ...(options.databaseSecretArn !== '' ? ['custom.queuebox.databaseSecretArn'] : []),
    ...(options.databaseUrlParameter !== '' ? ['custom.queuebox.databaseUrlParameter'] : []),
  ];
  if (stores.length === 0) return undefined;
  return (
    `${options.config} sets database.urlEnv: ${urlEnv} while ${stores.join(' and ')} is set: the functions put the connection string they read from it into ${FETCHED_URL_ENV}, ` +
    `but database.urlEnv makes them look for ${urlEnv}, so every function would fail at cold start. Remove database.urlEnv from ${options.config} (or set it to ${FETCHED_URL_ENV})`
  );
}

/** The variable `withDatabaseUrl` fills from the database secret or parameter. */
const FETCHED_URL_ENV = 'QUEUEBOX_DATABASE_URL';

/**
 * The poller and the relay claim only while more than `lambda.deadlineMarginMs` plus their claim
 * window is left of the invocation: with a timeout no longer than that, every invocation claims
 * nothing, yet finishes its pass, so the heartbeat alarm stays OK while nothing is delivered.
 */
function timeoutRefusals(options: PluginOptions, config: QueueBoxConfig): string[] {
  const marginMs = config.lambda.deadlineMarginMs;
  return (['outboxPoller', 'inboxRelay'] as const).flatMap((name) => {
    const timeoutSeconds = options.functions[name].timeout;
    const windowMs = MIN_TIME_TO_CLAIM_MS[name];
    if (timeoutSeconds * 1000 > marginMs + windowMs) return [];
    const key = `custom.queuebox.functions.${name}.timeout`;
    // At most 900 s: the configuration refuses a margin that leaves Lambda's longest timeout nothing.
    const leastSeconds = Math.floor((marginMs + windowMs) / 1000) + 1;
    return [
      `${name}: its timeout (${key}: ${timeoutSeconds} s) is not above lambda.deadlineMarginMs (${marginMs} ms) plus the ${windowMs} ms a pass needs to claim: ` +
        `every invocation would claim nothing while its heartbeat reports a finished pass. Raise ${key} to at least ${leastSeconds} s or lower lambda.deadlineMarginMs in ${options.config} below ${timeoutSeconds * 1000 - windowMs} ms`,
    ];
  });
}

/** True when the functions are told where the connection string is. */
export function hasDatabaseLocation(options: PluginOptions, config: QueueBoxConfig): boolean {
  return options.databaseSecretArn !== '' || options.databaseUrlParameter !== '' || config.database.urlEnv !== undefined;
}

/**
 * Warnings for a package that may be deployed but should be looked at: public routes without
 * authentication; sources on a FIFO queue without `aggregateIdPath` (the receiver does not read
 * `MessageGroupId`, so their rows have no aggregate and the queue's group order is lost).
 */
export function deployWarnings(config: QueueBoxConfig): string[] {
  const sources = Object.entries(config.inbox.sources);
  const open = sources
    .filter(([, source]) => source.type === 'http' && source.auth?.type === 'none')
    .map(([name, source]) => `inbox source ${name} has auth: none: its route POST ${config.inbox.basePath}${source.path ?? ''} accepts requests from anyone`);
  const unordered = sources
    .filter(([, source]) => source.type === 'sqs' && source.queueName?.endsWith('.fifo') === true && source.aggregateIdPath === undefined)
    .map(
      ([name, source]) =>
        `inbox source ${name} reads the FIFO queue ${source.queueName} but has no aggregateIdPath: its rows have no aggregate (MessageGroupId is not read), so they are ` +
        `${source.consumption === 'pull' ? 'claimed by pull workers' : 'relayed and delivered'} in parallel and the queue's order per message group is lost. Set aggregateIdPath to the body field the MessageGroupId is made from`,
    );
  return [...open, ...unordered];
}

/** An `sqs` event of one of the service's own functions. */
export interface ServiceSqsTrigger {
  /** The function's key in `functions`. */
  function: string;
  /** The event's `arn`, as osls has it (a string or an intrinsic function). */
  arn: unknown;
}

/**
 * Warnings for a queue of an `sqs` inbox source that one of the service's own functions is also
 * triggered by: Lambda splits a queue's messages between its event source mappings, so the ones
 * the service's function receives never reach the inbox. A queue is matched by name (the inbox
 * source's queue is in the stack's account and region), from the forms an ARN can be read in at
 * packaging; `resources`: the template's and the service's, for `Fn::GetAtt` of a named queue.
 */
export function sharedQueueWarnings(config: QueueBoxConfig, triggers: ServiceSqsTrigger[], resources: Record<string, unknown>, region?: string): string[] {
  const read = triggers.map((t) => ({ ...t, queue: sqsArnQueue(t.arn, resources) }));
  return Object.entries(config.inbox.sources)
    .filter(([, source]) => source.type === 'sqs')
    .sort(([a], [b]) => a.localeCompare(b))
    .flatMap(([name, source]) => {
      const queue = source.queueName ?? name;
      const theirs = read.filter((t) => t.queue?.name === queue && (t.queue.region === undefined || region === undefined || t.queue.region === region)).map((t) => t.function);
      return [...new Set(theirs)].map(
        (fn) =>
          `inbox source ${name}'s queue ${queue} also triggers your function ${fn}: Lambda splits the queue's messages between the two triggers, so the ones ${fn} receives never reach the inbox. ` +
          `Give ${fn} a queue of its own (an SNS topic or EventBridge rule can feed both queues)`,
      );
    });
}

const AWS_PSEUDO = new Set(['AWS::Partition', 'AWS::Region', 'AWS::AccountId', 'AWS::URLSuffix']);

/**
 * The queue name (and region, when literal) of an `sqs` event's ARN: a literal ARN, a `Fn::Sub`,
 * a `Fn::Join` of text and pseudo parameters, or `Fn::GetAtt` of a queue given a `QueueName`;
 * `undefined` for anything else (an import, a parameter).
 */
function sqsArnQueue(arn: unknown, resources: Record<string, unknown>): { name: string; region?: string } | undefined {
  if (typeof arn === 'string') return fromArnText(arn);
  if (typeof arn !== 'object' || arn === null) return undefined;
  const intrinsic = arn as Record<string, unknown>;
  if (typeof intrinsic['Fn::Sub'] === 'string') return fromArnText(intrinsic['Fn::Sub']);
  const join = intrinsic['Fn::Join'];
  if (Array.isArray(join) && typeof join[0] === 'string' && Array.isArray(join[1])) {
    const parts = (join[1] as unknown[]).map((p) => {
      if (typeof p === 'string') return p;
      const ref = (p as { Ref?: unknown } | null)?.Ref;
      return typeof ref === 'string' && AWS_PSEUDO.has(ref) ? `\${${ref}}` : undefined;
    });
    return parts.every((p) => p !== undefined) ? fromArnText(parts.join(join[0])) : undefined;
  }
  const getAtt = intrinsic['Fn::GetAtt'];
  const [id, attribute] = Array.isArray(getAtt) ? getAtt : typeof getAtt === 'string' ? getAtt.split('.') : [];
  if (typeof id !== 'string' || attribute !== 'Arn') return undefined;
  const queue = resources[id] as { Type?: unknown; Properties?: { QueueName?: unknown } } | undefined;
  return queue?.Type === 'AWS::SQS::Queue' && typeof queue.Properties?.QueueName === 'string' ? { name: queue.Properties.QueueName } : undefined;
}

/** `arn:<partition>:sqs:<region>:<account>:<name>`, parts possibly `${…}` (a region only when literal). */
function fromArnText(text: string): { name: string; region?: string } | undefined {
  // `${AWS::Region}` has colons of its own: one unknown part each.
  const unknown = '\u0000';
  const parts = text.replace(/\$\{[^}]*\}/g, unknown).split(':');
  if (parts.length !== 6 || parts[2] !== 'sqs' || parts[5] === '' || parts[5]!.includes(unknown)) return undefined;
  const region = parts[3]!;
  return { name: parts[5]!, ...(region !== '' && !region.includes(unknown) ? { region } : {}) };
}

/** The Serverless Framework's logical-id part of a name: its letters and digits, the first upper-cased (`normalizeNameToAlphaNumericOnly`). */
function alphanumericId(name: string): string {
  const kept = name.replace(/[^0-9A-Za-z]/g, '');
  return kept.charAt(0).toUpperCase() + kept.slice(1);
}

/** The Serverless Framework's logical id of an HTTP API route (`getHttpApiRouteLogicalId`): each path part lower-cased, `-` as `Dash`, `{x}` as `xVar`, letters and digits only. */
export function httpApiRouteLogicalId(routeKey: string): string {
  if (routeKey === '*') return 'HttpApiRouteDefault';
  const part = (raw: string) => {
    const kept = raw.toLowerCase().replace(/-/g, 'Dash').replace(/\{(.*)\}/g, '$1Var').replace(/[^0-9A-Za-z]/g, '');
    return kept.charAt(0).toUpperCase() + kept.slice(1);
  };
  return `HttpApiRoute${routeKey.split('/').map(part).join('')}`;
}

/**
 * Inbox triggers the Serverless Framework would give one logical id: it names an SQS event
 * source mapping after the queue name's letters and digits (`q-1` and `q_1`, `orders` and `Orders`
 * are one mapping), and an HTTP API route after its path lower-cased, letters and digits only
 * (`/hooka` and `/hook_a`, `/Hook` and `/hook` are one route). The later one replaces the earlier
 * in the template without a word: its queue is never read, or its route never created, while
 * packaging succeeds. `serviceRouteKeys`: the routes of the service's own functions, which share
 * the HTTP API (a clash with one of them drops a route the same way).
 */
export function triggerNameClashes(config: QueueBoxConfig, serviceRouteKeys: readonly string[] = []): string[] {
  const problems: string[] = [];
  const sources = Object.entries(config.inbox.sources).sort(([a], [b]) => a.localeCompare(b));
  const byId = new Map<string, Array<{ what: string; name: string }>>();
  const add = (id: string, what: string, name: string) => {
    const group = byId.get(id) ?? [];
    if (!group.some((g) => g.name === name)) group.push({ what, name });
    byId.set(id, group);
  };
  for (const [source, s] of sources) {
    if (s.type === 'sqs') add(`sqs:${alphanumericId(s.queueName ?? source)}`, `inbox source ${source} (queue ${s.queueName ?? source})`, s.queueName ?? source);
    else add(httpApiRouteLogicalId(`POST ${config.inbox.basePath}${s.path}`), `inbox source ${source} (route POST ${config.inbox.basePath}${s.path})`, `POST ${config.inbox.basePath}${s.path}`);
  }
  for (const key of serviceRouteKeys) {
    const id = httpApiRouteLogicalId(key);
    // Only a route QueueBox also names: the service's own routes among themselves are osls's business.
    if (byId.has(id)) add(id, `the service's route ${key}`, key);
  }
  for (const [id, group] of byId) {
    if (group.length < 2) continue;
    const names = group.map((g) => g.what).join(' and ');
    problems.push(
      id.startsWith('sqs:')
        ? `${names} would get one SQS trigger: the Serverless Framework names a queue's event source mapping after the letters and digits of its name (${id.slice(4)}), so the later one replaces the earlier and that queue is never read. Use queues whose names differ in more than case, '-' and '_'`
        : `${names} would be one route (${id}): the Serverless Framework names an HTTP API route after its path lower-cased, letters and digits only, so the later one replaces the earlier and that route is never created. Use paths that differ in more than case and punctuation`,
    );
  }
  return problems;
}

/**
 * Problems of the environment every QueueBox function gets from `provider.environment`, found at
 * packaging instead of at every cold start: a `QUEUEBOX_…` override that the configuration
 * refuses (a misspelled key, a value of the wrong type; `ConfigError` names the variable; the
 * overrides are read together, as a function reads them), overrides that change what the packaged
 * stack is built from (`templateOf`: the dashboard, alarms, IAM grants, triggers and routes; and
 * the bundles), and a `database.urlEnv` that is the only database location while no function gets
 * that variable. Values that are not strings (an intrinsic function resolved at deploy time) are
 * not checked.
 */
export function providerEnvironmentProblems(
  options: PluginOptions,
  config: QueueBoxConfig,
  environment: Readonly<Record<string, unknown>> | undefined,
  validate: (env: Record<string, string>) => QueueBoxConfig,
  templateOf: (config: QueueBoxConfig) => unknown,
): string[] {
  const problems: string[] = [];
  const overrides = Object.fromEntries(
    Object.entries(environment ?? {}).filter((entry): entry is [string, string] => entry[0].startsWith('QUEUEBOX_') && entry[0] !== FETCHED_URL_ENV && typeof entry[1] === 'string'),
  );
  if (Object.keys(overrides).length > 0) {
    let running: QueueBoxConfig | undefined;
    try {
      running = validate(overrides);
    } catch (error) {
      problems.push(`provider.environment, which every QueueBox function gets, would stop each one at cold start: ${error instanceof Error ? error.message : String(error)}`);
    }
    let built: string | undefined;
    if (running !== undefined) {
      try {
        built = JSON.stringify(packagedFrom(running, templateOf));
      } catch (error) {
        // A value the configuration takes but no stack can be built from (a queue URL whose name AWS refuses).
        problems.push(`provider.environment, which every QueueBox function gets, sets a value the stack cannot be built from: ${error instanceof Error ? error.message : String(error)}`);
      }
    }
    if (running !== undefined && built !== undefined) {
      const packaged = JSON.stringify(packagedFrom(config, templateOf));
      if (built !== packaged) {
        // The variables that change the stack on their own, or without which it is the packaged one
        // (a variable valid only beside another); all of them when none is found so.
        const names = Object.keys(overrides);
        const stackOf = (env: Record<string, string>): string | undefined => {
          try {
            return JSON.stringify(packagedFrom(validate(env), templateOf));
          } catch {
            return undefined;
          }
        };
        const changes = names.filter((name) => {
          const alone = stackOf({ [name]: overrides[name]! });
          if (alone !== undefined) return alone !== packaged;
          return stackOf(Object.fromEntries(Object.entries(overrides).filter(([other]) => other !== name))) === packaged;
        });
        const culprits = changes.length > 0 ? changes : names;
        const one = culprits.length === 1;
        problems.push(
          `provider.environment sets ${culprits.join(', ')}, which the functions read, but the dashboard, alarms, IAM grants, triggers and routes are built from ${options.config}, which the plugin reads without ${one ? 'it' : 'them'}: ` +
            `the packaged stack would not match the functions (alarms on metrics they no longer write, a queue or bus they are not granted, a trigger for another queue). Set ${one ? 'its key' : 'their keys'} in ${options.config} instead`,
        );
      }
    }
  }
  const urlEnv = config.database.urlEnv;
  const stored = options.databaseSecretArn !== '' || options.databaseUrlParameter !== '';
  if (urlEnv !== undefined && !stored && !options.allowMissingDatabase && (environment?.[urlEnv] === undefined || environment[urlEnv] === '')) {
    problems.push(
      `${options.config} sets database.urlEnv: ${urlEnv}, the only database location of this stage, but provider.environment does not set ${urlEnv}: every function would find no database at cold start. ` +
        `Set provider.environment.${urlEnv}, or custom.queuebox.databaseSecretArn or custom.queuebox.databaseUrlParameter (then remove database.urlEnv)`,
    );
  }
  return problems;
}

/**
 * What the packaged stack is built from one configuration: the template (`templateOf`) and what
 * the bundles depend on (the database driver packaged, the tracer left out or in).
 */
function packagedFrom(config: QueueBoxConfig, templateOf: (config: QueueBoxConfig) => unknown): unknown {
  return { template: templateOf(config), databaseType: config.database.type, tracing: config.observability.tracing };
}
