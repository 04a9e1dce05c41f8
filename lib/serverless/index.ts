/**
 * `plugins: [queuebox/serverless]`: adds QueueBox to a Serverless Framework (osls) service, next to
 * the service's own functions, configured under `custom.queuebox` (`options.ts`).
 *
 * - `initialize`: validates `custom.queuebox`, loads the QueueBox configuration, and adds the
 *   functions `queuebox<Name>` (`functions.ts`), each with its own runtime, architecture, role,
 *   timeout, memory, retries off and package, so the service's provider settings do not reach them.
 * - packaging (`package`, `deploy`, `deploy function`): refuses a stage with no database location
 *   and a configuration with `database.url` in it, then bundles the functions into `.queuebox/`.
 * - `invoke local` of a QueueBox function: bundles that function first.
 * - after the events are compiled: adds roles, dashboard, alarms, parameters and HTTP route
 *   settings to the template (`template.ts`), and warns about what it cannot set there (the
 *   stage of a shared HTTP API) and about a service function that shares an inbox source's queue.
 */
import { join, resolve } from 'node:path';
import { loadConfig } from '../config/load-config.ts';
import type { QueueBoxConfig } from '../config/schema.ts';
import { ConfigError } from '../errors.ts';
import { bundleFunctions, loadEsbuild } from './bundle.ts';
import { deployRefusal, deployWarnings, hasDatabaseLocation, providerEnvironmentProblems, sharedQueueWarnings, triggerNameClashes, type ServiceSqsTrigger } from './deploy-checks.ts';
import { deployedFunctionName, deployedNamesProblem, functionKey, functionLogicalId, FUNCTIONS, type Deployment, type FunctionDef } from './functions.ts';
import { parsePluginOptions, pluginOptionsJsonSchema, type FunctionOptions, type PluginOptions } from './options.ts';
import { heartbeatWarnings } from './monitoring.ts';
import { roleLogicalId } from './roles.ts';
import { scaleOutCap } from './scale-out-settings.ts';
import { buildStackFragment, type StackFragment } from './stack.ts';
import { extendTemplate, functionsInVpc, type Template } from './template.ts';

/** The folder, in the service directory, that the bundles and the shipped configuration go to. */
export const BUILD_DIR = '.queuebox';

const DESCRIPTIONS: Record<string, string> = {
  outboxPoller: 'QueueBox outbox poller (claim, publish, settle)',
  inboxHttp: 'QueueBox HTTP inbox receiver',
  inboxSqs: 'QueueBox SQS inbox receiver',
  inboxRelay: 'QueueBox inbox push relay',
  reclaim: 'QueueBox reclaim: scheduled (throttled), or by hand (now, both tables)',
  retention: 'QueueBox retention (no-op unless retention.enabled)',
  replay: 'QueueBox replay (invoke by hand with a filter)',
  migrate: 'QueueBox migrations (invoke by hand)',
};

type Dict = Record<string, unknown>;

/**
 * A pattern that excludes every file, spelled unlike any of the service's `package.patterns`: osls
 * merges a function's patterns after the service's through a Set, so a function-level `'!**'` equal
 * to the service's would be dropped, and the service's includes that follow it would reach the
 * function's zip. `**`, with `/**` appended any number of times, matches every path (dotfiles too) for osls.
 */
export function excludeAllAfter(servicePatterns: readonly string[]): string {
  const taken = new Set(servicePatterns);
  let pattern = '!**';
  while (taken.has(pattern)) pattern += '/**';
  return pattern;
}

/**
 * A service pattern that names the plugin's build folder, or `undefined`. osls merges each
 * function's patterns after the service's through a Set: a service pattern equal to one of a
 * QueueBox function's includes would take that include's place, before the plugin's
 * `!.queuebox/**`, and leave the file out of the function's zip; and no service file belongs
 * there. `!.queuebox/**` itself (what the plugin adds) is allowed.
 */
export function ownedPatternProblem(servicePatterns: readonly string[]): string | undefined {
  for (const pattern of servicePatterns) {
    if (pattern === `!${BUILD_DIR}/**`) continue;
    const path = pattern.replace(/^!/, '').replace(/^(\.\/)+/, '');
    if (path === BUILD_DIR || path.startsWith(`${BUILD_DIR}/`)) {
      return `package.patterns: '${pattern}' names ${BUILD_DIR}/, the folder QueueBox's plugin builds its functions into and packages for them alone; remove the pattern (the service's own package leaves ${BUILD_DIR}/ out already)`;
    }
  }
  return undefined;
}

/**
 * A warning when the service bundles its own functions with serverless-esbuild without
 * `package.individually: true`: serverless-esbuild then zips its whole build folder as the
 * service's one package, having copied into it the files of every function's `package.patterns`,
 * QueueBox's too, so each of the service's functions would carry every QueueBox bundle.
 */
export function serverlessEsbuildWarning(service: { plugins?: unknown; package?: { individually?: unknown } }, ownFunctions: readonly string[]): string | undefined {
  const plugins = Array.isArray(service.plugins) ? service.plugins : (service.plugins as { modules?: unknown } | undefined)?.modules;
  if (!Array.isArray(plugins) || !plugins.includes('serverless-esbuild')) return undefined;
  if (service.package?.individually === true || ownFunctions.length === 0) return undefined;
  return `serverless-esbuild is among the plugins and package.individually is not true: serverless-esbuild zips its whole build folder as the service's one package, and copies into it every function's package.patterns, QueueBox's too, so ${ownFunctions.join(', ')} would each carry every QueueBox bundle (${BUILD_DIR}/); set package.individually: true`;
}

/** The part of the osls `serverless` object the plugin uses. */
interface Serverless {
  serviceDir: string;
  service: {
    service: string;
    provider: Dict & { compiledCloudFormationTemplate: Template; logRetentionInDays?: number };
    functions: Record<string, Dict & { events?: Dict[] }>;
    custom?: Dict;
    package?: { patterns?: string[]; individually?: boolean };
    plugins?: string[] | { modules?: string[] };
    resources?: { Resources?: Dict; Parameters?: Dict; Conditions?: Dict };
  };
  getProvider(name: 'aws'): { getStage(): string; getRegion?(): string };
  configSchemaHandler?: { defineCustomProperties?(schema: Dict): void };
  classes: { Error: new (message: string) => Error };
}

interface Log {
  notice(message: string): void;
  info(message: string): void;
  warning(message: string): void;
}

/** The Serverless plugin (osls loads the default export). */
export default class QueueBoxServerlessPlugin {
  readonly hooks: Record<string, () => Promise<void>>;
  private readonly log: Log;
  private options!: PluginOptions;
  private config!: QueueBoxConfig;
  private fragment!: StackFragment;
  private deployment!: Deployment;
  /** The `custom.queuebox.httpApi` throttling keys the service set (the parsed options hold defaults too). */
  private explicitHttpApiThrottling: string[] = [];

  constructor(
    private readonly serverless: Serverless,
    private readonly cliOptions: { function?: string } = {},
    utils: { log?: Log } = {},
  ) {
    const print = (message: string) => process.stderr.write(`${message}\n`);
    this.log = utils.log ?? { notice: print, info: () => {}, warning: print };
    serverless.configSchemaHandler?.defineCustomProperties?.({ properties: { queuebox: pluginOptionsJsonSchema() } });
    this.hooks = {
      initialize: () => this.fail(() => this.addFunctions()),
      'before:package:createDeploymentArtifacts': () => this.fail(() => this.build(true)),
      // `-f` naming one of the service's own functions builds nothing of QueueBox's.
      'before:deploy:function:packageFunction': () => this.fail(() => this.buildRequested(true)),
      'before:invoke:local:invoke': () => this.fail(() => this.buildRequested(false)),
      'after:package:compileEvents': () => this.fail(() => this.addToTemplate()),
    };
  }

  /** Runs a step; a failure stops osls with its message (no stack trace). */
  private async fail(step: () => Promise<void> | void): Promise<void> {
    try {
      await step();
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      throw new this.serverless.classes.Error(`QueueBox: ${error instanceof ConfigError ? `${this.options?.config ?? 'custom.queuebox.config'}: ` : ''}${message}`);
    }
  }

  /** Bundles the QueueBox function named by `-f`, if it is one. */
  private async buildRequested(packaging: boolean): Promise<void> {
    const fn = FUNCTIONS.find((f) => functionKey(f.name) === this.cliOptions.function);
    if (fn !== undefined) await this.build(packaging, [fn.name]);
  }

  /** The stack fragment of `config` for this service's deployment, schedules and reserved concurrency. */
  private stackFragmentOf(config: QueueBoxConfig): StackFragment {
    const { outboxPoller, inboxRelay, reclaim } = this.options.functions;
    const reserved = Object.fromEntries(Object.entries(this.options.functions).map(([name, settings]) => [name, settings.reservedConcurrency]));
    return buildStackFragment(config, this.deployment, { outboxPoller, inboxRelay, reclaim }, reserved);
  }

  private addFunctions(): void {
    const service = this.serverless.service;
    this.options = parsePluginOptions(service.custom?.queuebox);
    const httpApi = (service.custom?.queuebox as { httpApi?: Dict } | undefined)?.httpApi;
    this.explicitHttpApiThrottling = ['throttlingRateLimit', 'throttlingBurstLimit'].filter((key) => httpApi?.[key] !== undefined);
    this.config = loadConfig({ path: resolve(this.serverless.serviceDir, this.options.config), env: {} });
    this.deployment = { service: service.service, stage: this.serverless.getProvider('aws').getStage() };
    const namesProblem = deployedNamesProblem(this.deployment);
    if (namesProblem !== undefined) throw new Error(namesProblem);
    this.fragment = this.stackFragmentOf(this.config);
    service.functions ??= {};
    // The bundles belong to QueueBox's packages only, never to the service's own artifact.
    service.package ??= {};
    const owned = ownedPatternProblem(service.package.patterns ?? []);
    if (owned !== undefined) throw new Error(owned);
    service.package.patterns = [...(service.package.patterns ?? []), `!${BUILD_DIR}/**`];
    for (const fn of FUNCTIONS) {
      const key = functionKey(fn.name);
      if (key in service.functions) throw new Error(`the service already has a function ${key}; QueueBox's plugin adds one of that name: rename yours`);
      service.functions[key] = this.functionDefinition(fn);
    }
  }

  private functionDefinition(fn: FunctionDef): Dict {
    const settings = this.options.functions[fn.name as keyof PluginOptions['functions']] as FunctionOptions;
    const environment: Record<string, string> = {
      // Relative to the working directory: /var/task on Lambda, the service under `osls invoke local`.
      QUEUEBOX_CONFIG: `${BUILD_DIR}/queuebox.yml`,
      QUEUEBOX_DATABASE_SECRET_ID: this.options.databaseSecretArn,
      QUEUEBOX_DATABASE_URL_PARAMETER: this.options.databaseUrlParameter,
      NODE_OPTIONS: '--enable-source-maps',
    };
    if (fn.name === 'inboxHttp') environment.QUEUEBOX_SECRETS_PARAMETER_PATH = this.secretsParameterPath();
    // A reserved concurrency below the scale-out setting caps it (the override wins over the file).
    Object.assign(environment, scaleOutCap(this.config, fn.name, settings.reservedConcurrency).environment);
    const events =
      fn.name === 'inboxHttp' ? this.fragment.inboxHttpEvents : fn.name === 'inboxSqs' ? this.fragment.inboxSqsEvents : settings.schedule ? [{ schedule: settings.schedule }] : [];
    return {
      name: deployedFunctionName(this.deployment, fn.name),
      handler: `${BUILD_DIR}/${fn.name}/index.handler`,
      description: DESCRIPTIONS[fn.name],
      runtime: 'nodejs24.x',
      architecture: 'arm64',
      role: roleLogicalId(fn.name),
      timeout: settings.timeout,
      memorySize: settings.memorySize ?? this.options.memorySize,
      maximumRetryAttempts: 0,
      // Bundled already: serverless-esbuild, when the service uses it, leaves these functions alone.
      skipEsbuild: true,
      ...(settings.reservedConcurrency !== undefined ? { reservedConcurrency: settings.reservedConcurrency } : {}),
      logRetentionInDays: this.logRetentionInDays(),
      // Only when on: osls grants X-Ray to the service's shared role whenever any function sets tracing.
      // Off, a provider.tracing.lambda would make it Active with a role that may not send segments
      // (Lambda refuses that function): PassThrough, and osls's role grant is then the provider's own.
      ...(this.fragment.providerTracing ? { tracing: 'Active' } : this.providerTraces() ? { tracing: 'PassThrough' } : {}),
      layers: [],
      ...(this.options.vpc ? { vpc: this.options.vpc } : {}),
      environment,
      package: { individually: true, patterns: [excludeAllAfter(this.serverless.service.package?.patterns ?? []), `${BUILD_DIR}/${fn.name}/**`, `${BUILD_DIR}/queuebox.yml`] },
      events,
    };
  }

  /** The HTTP API routes of the service's own functions (`POST /orders`), as their events name them. */
  private serviceRouteKeys(): string[] {
    const ours = new Set(FUNCTIONS.map((f) => functionKey(f.name)));
    return Object.entries(this.serverless.service.functions)
      .filter(([key]) => !ours.has(key))
      .flatMap(([, fn]) => (fn.events ?? []).flatMap((e) => {
        const api = e.httpApi as string | { method?: unknown; path?: unknown } | undefined;
        if (typeof api === 'string') return [api === '*' ? '*' : api.replace(/\s+/, ' ')];
        if (api !== undefined && typeof api === 'object' && typeof api.path === 'string') return [`${typeof api.method === 'string' ? api.method.toUpperCase() : '*'} ${api.path}`];
        return [];
      }));
  }

  private providerTraces(): boolean {
    const tracing = this.serverless.service.provider.tracing as { lambda?: unknown } | undefined;
    return Boolean(tracing?.lambda);
  }

  private secretsParameterPath(): string {
    return this.options.secretsParameterPath ?? `/queuebox/${this.deployment.stage}`;
  }

  private logRetentionInDays(): number {
    return this.options.logRetentionInDays ?? this.serverless.service.provider.logRetentionInDays ?? 30;
  }

  /** Refuses what must not be deployed, then bundles (`only`: those functions). */
  private async build(packaging: boolean, only?: string[]): Promise<void> {
    if (packaging) {
      const refusal = deployRefusal(this.options, this.config, this.deployment.stage);
      if (refusal !== undefined) throw new Error(refusal);
      const configPath = resolve(this.serverless.serviceDir, this.options.config);
      const problems = [
        ...triggerNameClashes(this.config, this.serviceRouteKeys()),
        ...providerEnvironmentProblems(
          this.options,
          this.config,
          this.serverless.service.provider.environment as Record<string, unknown> | undefined,
          (env) => loadConfig({ path: configPath, env }),
          (config) => this.stackFragmentOf(config),
        ),
      ];
      if (problems.length > 0) throw new Error(problems.join('\n'));
      if (!hasDatabaseLocation(this.options, this.config)) {
        this.log.warning(`QueueBox: stage ${this.deployment.stage} has no database location (allowMissingDatabase): these functions cannot reach a database`);
      }
      const ours = new Set(FUNCTIONS.map((f) => functionKey(f.name)));
      const esbuildWarning = serverlessEsbuildWarning(this.serverless.service, Object.keys(this.serverless.service.functions).filter((key) => !ours.has(key)));
      if (esbuildWarning !== undefined) this.log.warning(`QueueBox: ${esbuildWarning}`);
    }
    const { outboxPoller, inboxRelay, reclaim } = this.options.functions;
    const capWarnings = (['outboxPoller', 'inboxRelay'] as const).flatMap((name) => scaleOutCap(this.config, name, this.options.functions[name].reservedConcurrency).warning ?? []);
    for (const warning of [...deployWarnings(this.config), ...heartbeatWarnings({ outboxPoller, inboxRelay, reclaim }), ...capWarnings]) this.log.warning(`QueueBox: ${warning}`);
    const esbuild = await loadEsbuild(this.serverless.serviceDir);
    const outDir = join(this.serverless.serviceDir, BUILD_DIR);
    const report = await bundleFunctions({ esbuild, config: this.config, configPath: resolve(this.serverless.serviceDir, this.options.config), outDir, ...(only ? { only } : {}), log: (line) => this.log.info(line) });
    this.log.notice(`QueueBox: bundled ${Object.keys(report).join(', ')} into ${BUILD_DIR}/ with ${this.options.config}`);
    if (packaging && this.fragment.secretNames.length > 0) {
      this.log.notice(`QueueBox: queueboxInboxHttp reads these SSM SecureStrings at cold start: ${this.fragment.secretNames.map((n) => `${this.secretsParameterPath()}/${n}`).join(', ')}`);
    }
  }

  private addToTemplate(): void {
    const service = this.serverless.service;
    const serviceResourceIds = new Set(Object.values(service.resources ?? {}).flatMap((section) => Object.keys((section as Dict | undefined) ?? {})));
    const ours = new Set(FUNCTIONS.map((f) => functionKey(f.name)));
    const serviceSqsTriggers: ServiceSqsTrigger[] = Object.entries(service.functions)
      .filter(([key]) => !ours.has(key))
      .flatMap(([key, fn]) => (fn.events ?? []).flatMap((e) => (e.sqs === undefined ? [] : [{ function: key, arn: typeof e.sqs === 'string' ? e.sqs : (e.sqs as { arn: unknown }).arn }])));
    const template = service.provider.compiledCloudFormationTemplate;
    // From the compiled functions: by now osls has set provider.vpc (to {}) for a service without one.
    const vpcAccess = this.options.vpcAccess ?? functionsInVpc(template, FUNCTIONS.map((f) => functionLogicalId(f.name)));
    // The service's queues, for an `sqs` event naming one by `Fn::GetAtt`: osls merges its `resources` only later.
    const resources = { ...template.Resources, ...(service.resources?.Resources ?? {}) };
    const warnings = extendTemplate(template, {
      fragment: this.fragment,
      options: this.options,
      secretsParameterPath: this.secretsParameterPath(),
      vpcAccess,
      logRetentionInDays: this.logRetentionInDays(),
      serviceResourceIds,
      serviceSqsArns: serviceSqsTriggers.map((t) => t.arn),
      explicitHttpApiThrottling: this.explicitHttpApiThrottling,
    });
    const region = this.serverless.getProvider('aws').getRegion?.();
    for (const warning of [...warnings, ...sharedQueueWarnings(this.config, serviceSqsTriggers, resources, region)]) this.log.warning(`QueueBox: ${warning}`);
  }
}
