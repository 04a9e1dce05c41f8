/**
 * The plugin's rules without packaging: `custom.queuebox` validated key by key with today's
 * defaults, what packaging refuses (no database location, `database.url` in the YAML) and warns
 * about (`auth: none`), a destination region that is not a region, and the functions `initialize`
 * adds to a service (named apart from the service's own, refusing a name it already has).
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { parseConfig } from '../../lib/config/load-config.ts';
import { loadEsbuild } from '../../lib/serverless/bundle.ts';
import { deployRefusal, deployWarnings } from '../../lib/serverless/deploy-checks.ts';
import { FUNCTIONS, functionKey } from '../../lib/serverless/functions.ts';
import QueueBoxServerlessPlugin, { serverlessEsbuildWarning } from '../../lib/serverless/index.ts';
import { parsePluginOptions, pluginOptionsJsonSchema, pluginOptionsSchema } from '../../lib/serverless/options.ts';

const service = mkdtempSync(join(tmpdir(), 'qb-plugin-options-'));
writeFileSync(join(service, 'queuebox.yml'), 'inbox:\n  sources:\n    hook: { type: http, path: /hook, auth: { type: none } }\n');

/** A plugin on a minimal stand-in for osls's `serverless` object, with the service's own function `hello`. */
function pluginFor(custom: unknown, functions: Record<string, Record<string, unknown>> = { hello: { handler: 'handler.hello' } }, cliOptions: { function?: string } = {}) {
  const serverless = {
    serviceDir: service,
    service: { service: 'shop', provider: {} as Record<string, unknown>, functions, custom: { queuebox: custom }, package: {} as { patterns?: string[] } },
    getProvider: () => ({ getStage: () => 'dev' }),
    classes: { Error },
  };
  const warnings: string[] = [];
  const plugin = new QueueBoxServerlessPlugin(serverless as never, cliOptions, { log: { notice: () => {}, info: () => {}, warning: (m: string) => warnings.push(m) } });
  return { plugin, serverless, warnings, hook: (name: string) => plugin.hooks[name]!() };
}

describe('the Serverless plugin without packaging', { timeout: 30_000 }, () => {
  after(() => rmSync(service, { recursive: true, force: true }));

  it('fills in today\'s defaults for every key of custom.queuebox', () => {
    const options = parsePluginOptions({});
    assert.equal(options.config, 'queuebox.yml');
    assert.deepEqual([options.databaseSecretArn, options.databaseUrlParameter, options.allowMissingDatabase, options.alarmTopicArn], ['', '', false, '']);
    assert.deepEqual(options.httpApi, { throttlingRateLimit: 100, throttlingBurstLimit: 200, accessLogs: true });
    assert.equal(options.memorySize, 256);
    assert.deepEqual(options.functions.outboxPoller, { schedule: 'rate(1 minute)', timeout: 60, memorySize: 512 });
    assert.deepEqual(options.functions.inboxRelay, { schedule: 'rate(1 minute)', timeout: 60, memorySize: 512 });
    assert.deepEqual([options.functions.reclaim.schedule, options.functions.reclaim.timeout], ['rate(5 minutes)', 30]);
    assert.deepEqual([options.functions.retention.schedule, options.functions.retention.timeout], ['rate(1 hour)', 300]);
    assert.deepEqual([options.functions.inboxHttp.timeout, options.functions.inboxHttp.reservedConcurrency], [10, 10]);
    assert.deepEqual([options.functions.inboxSqs.timeout, options.functions.inboxSqs.reservedConcurrency], [30, 5]);
    assert.deepEqual([options.functions.replay.timeout, options.functions.migrate.timeout], [120, 300]);
    assert.equal(parsePluginOptions({ allowMissingDatabase: 'true' }).allowMissingDatabase, true, 'a --param gives text');
    assert.equal(pluginOptionsJsonSchema().$schema, undefined);
    assert.equal((pluginOptionsJsonSchema() as { additionalProperties: boolean }).additionalProperties, false);
  });

  it('docs/deploy.md lists exactly the keys of custom.queuebox', () => {
    const shape = pluginOptionsSchema.shape;
    const keys = Object.keys(shape).flatMap((key) => {
      if (key === 'httpApi') return Object.keys(shape.httpApi.parse({})).map((k) => `httpApi.${k}`);
      if (key === 'functions') return ['schedule', 'timeout', 'memorySize', 'reservedConcurrency'].map((k) => `functions.<name>.${k}`);
      return [key];
    });
    const section = readFileSync('docs/deploy.md', 'utf8').split('## `custom.queuebox`')[1]!.split('\n## ')[0]!;
    const documented = [...section.matchAll(/^\| `([^`]+)` \|/gm)].map((m) => m[1]);
    assert.deepEqual(documented.sort(), keys.sort());
    for (const [name, fn] of Object.entries(shape.functions.parse({}))) {
      assert.ok(Object.keys(fn).every((k) => ['schedule', 'timeout', 'memorySize', 'reservedConcurrency'].includes(k)), name);
    }
  });

  it('refuses a bad custom.queuebox naming each key', () => {
    assert.throws(() => parsePluginOptions({ functions: { outboxPoller: { timout: 30 } } }), /custom\.queuebox\.functions\.outboxPoller\.timout: unknown key/);
    assert.throws(() => parsePluginOptions({ functions: { replay: { schedule: 'rate(1 minute)' } } }), /custom\.queuebox\.functions\.replay\.schedule: unknown key/);
    assert.throws(() => parsePluginOptions({ databaseSecretArn: 'queuebox/prod/db' }), /custom\.queuebox\.databaseSecretArn: must be a Secrets Manager secret ARN/);
    assert.throws(() => parsePluginOptions({ functions: { reclaim: { schedule: 'every 5 minutes', timeout: 901 } } }), (error: Error) => /functions\.reclaim\.schedule: must be rate/.test(error.message) && /functions\.reclaim\.timeout/.test(error.message));
  });

  it('accepts the schedule expressions EventBridge accepts and refuses the others, naming the key and why', () => {
    const scheduleOf = (schedule: string) => parsePluginOptions({ functions: { outboxPoller: { schedule } } }).functions.outboxPoller.schedule;
    for (const valid of ['rate(1 minute)', 'rate(5 minutes)', 'rate(1 hour)', 'rate(2 days)', 'cron(0/5 * * * ? *)', 'cron(0 12 ? * MON-FRI *)', 'cron(15 10 ? * 6L 2026-2030)', 'cron(0 8 1W * ? *)', 'cron(0 8 L * ? *)', 'cron(0 9 ? * 2#1 *)', 'cron(0,30 8-17 ? JAN-MAR,DEC * *)']) {
      assert.equal(scheduleOf(valid), valid);
    }
    const refused: Array<[string, RegExp]> = [
      ['rate(1 minutes)', /must be rate\(1 minute\)/],
      ['rate(5 minute)', /must be rate\(5 minutes\)/],
      ['rate(0 minutes)', /at least 1/],
      ['rate(5 seconds)', /minute\(s\), hour\(s\) or day\(s\)/],
      ['rate(5minutes)', /must be rate\(<value> <unit>\)/],
      ['cron(*/5 * * * *)', /six fields .* not 5/],
      ['cron(0 12 * * * *)', /\? in exactly one of day-of-month and day-of-week/],
      ['cron(0 12 ? * ? *)', /\? in exactly one/],
      ['cron(60 * * * ? *)', /minutes field 60: 60 is outside 0-59/],
      ['cron(0 24 * * ? *)', /hours field 24/],
      ['cron(0 8 ? * FUNDAY *)', /day-of-week field FUNDAY/],
      ['cron(0 8 * 13 ? *)', /month field 13/],
      ['cron(0 8 * * ? 1969)', /year field 1969/],
      ['cron(0 8 ? * 2#6 *)', /the week after # is 1-5/],
      ['cron(? 8 * * ? *)', /minutes field \?: takes no \?/],
      ['every 5 minutes', /must be rate\(…\) or cron\(…\)/],
    ];
    for (const [schedule, why] of refused) {
      assert.throws(() => scheduleOf(schedule), (error: Error) => /custom\.queuebox\.functions\.outboxPoller\.schedule: /.test(error.message) && why.test(error.message), schedule);
    }
  });

  it('accepts only a log retention CloudWatch Logs accepts', () => {
    assert.equal(parsePluginOptions({ logRetentionInDays: 14 }).logRetentionInDays, 14);
    assert.equal(parsePluginOptions({ logRetentionInDays: 3653 }).logRetentionInDays, 3653);
    for (const days of [8, 0, -1, 10000, 14.5]) {
      assert.throws(() => parsePluginOptions({ logRetentionInDays: days }), /custom\.queuebox\.logRetentionInDays: must be one of the periods CloudWatch Logs accepts: 1, 3, 5, 7, 14, 30/, String(days));
    }
  });

  it('refuses to package with no database location or with database.url in the file; the opt-out and each location pass', () => {
    const config = parseConfig({});
    assert.match(deployRefusal(parsePluginOptions({}), config, 'dev')!, /^stage dev has no database location: set custom\.queuebox\.databaseSecretArn .* or custom\.queuebox\.databaseUrlParameter .*allowMissingDatabase: true/);
    assert.equal(deployRefusal(parsePluginOptions({ allowMissingDatabase: true }), config, 'dev'), undefined);
    assert.equal(deployRefusal(parsePluginOptions({ databaseSecretArn: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:db' }), config, 'dev'), undefined);
    assert.equal(deployRefusal(parsePluginOptions({ databaseUrlParameter: '/shop/dev/database-url' }), config, 'dev'), undefined);
    assert.equal(deployRefusal(parsePluginOptions({}), parseConfig({ database: { urlEnv: 'SHOP_DATABASE_URL' } }), 'dev'), undefined);
    const withUrl = parseConfig({ database: { url: 'postgres://app:hunter2@db.internal/app' } });
    const refusal = deployRefusal(parsePluginOptions({ databaseUrlParameter: '/shop/dev/database-url' }), withUrl, 'dev')!;
    assert.match(refusal, /queuebox\.yml sets database\.url: every function package would carry the connection string .*database\.urlEnv/);
    assert.ok(!refusal.includes('hunter2'), 'the refusal does not print the password');
  });

  it('refuses to package a poller or relay whose timeout leaves no time to claim after lambda.deadlineMarginMs', () => {
    const located = { databaseSecretArn: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:db' };
    const timeouts = (outboxPoller: number, inboxRelay: number) => parsePluginOptions({ ...located, functions: { outboxPoller: { timeout: outboxPoller }, inboxRelay: { timeout: inboxRelay } } });
    const config = parseConfig({});
    // A pass claims only while more than the margin plus 1 s is left: 5 s and 6 s claim nothing.
    for (const seconds of [5, 6]) {
      const refusal = deployRefusal(timeouts(seconds, 60), config, 'dev')!;
      assert.match(refusal, new RegExp(`^outboxPoller: its timeout \\(custom\\.queuebox\\.functions\\.outboxPoller\\.timeout: ${seconds} s\\) is not above lambda\\.deadlineMarginMs \\(5000 ms\\) plus the 1000 ms a pass needs to claim`), String(seconds));
      assert.match(refusal, /every invocation would claim nothing.*Raise custom\.queuebox\.functions\.outboxPoller\.timeout to at least 7 s or lower lambda\.deadlineMarginMs in queuebox\.yml/);
      assert.ok(!refusal.includes('inboxRelay'), refusal);
    }
    assert.match(deployRefusal(timeouts(60, 6), config, 'dev')!, /^inboxRelay: its timeout \(custom\.queuebox\.functions\.inboxRelay\.timeout: 6 s\) is not above/);
    assert.equal(deployRefusal(timeouts(7, 7), config, 'dev'), undefined);
    // The least margin (1000 ms): 3 s claims, 2 s does not.
    assert.equal(deployRefusal(timeouts(3, 3), parseConfig({ lambda: { deadlineMarginMs: 1000 } }), 'dev'), undefined);
    assert.match(deployRefusal(timeouts(2, 60), parseConfig({ lambda: { deadlineMarginMs: 1000 } }), 'dev')!, /^outboxPoller: .*\(1000 ms\).*at least 3 s/);
    // The other functions end their statements within the time they have, whatever the margin.
    assert.equal(deployRefusal(parsePluginOptions({ ...located, functions: { reclaim: { timeout: 1 }, retention: { timeout: 1 }, inboxHttp: { timeout: 1 } } }), parseConfig({ lambda: { deadlineMarginMs: 1000 } }), 'dev'), undefined);
  });

  it('refuses to package with a margin too large for both timeouts, naming both functions', () => {
    const options = parsePluginOptions({ databaseSecretArn: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:db', functions: { outboxPoller: { timeout: 899 }, inboxRelay: { timeout: 899 } } });
    const refusal = deployRefusal(options, parseConfig({ lambda: { deadlineMarginMs: 898_999 } }), 'dev')!;
    assert.match(refusal, /^outboxPoller: its timeout \(custom\.queuebox\.functions\.outboxPoller\.timeout: 899 s\) is not above lambda\.deadlineMarginMs \(898999 ms\)/m);
    assert.match(refusal, /^inboxRelay: its timeout \(custom\.queuebox\.functions\.inboxRelay\.timeout: 899 s\)/m);
    assert.match(refusal, /Raise custom\.queuebox\.functions\.inboxRelay\.timeout to at least 900 s or lower lambda\.deadlineMarginMs in queuebox\.yml below 898000 ms/);
    const longest = parsePluginOptions({ databaseSecretArn: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:db', functions: { outboxPoller: { timeout: 900 }, inboxRelay: { timeout: 900 } } });
    assert.equal(deployRefusal(longest, parseConfig({ lambda: { deadlineMarginMs: 898_999 } }), 'dev'), undefined);
  });

  it('stops packaging through the plugin when the poller timeout leaves no time to claim', async () => {
    const { hook } = pluginFor({ allowMissingDatabase: true, functions: { outboxPoller: { timeout: 6 } } });
    await hook('initialize');
    await assert.rejects(hook('before:package:createDeploymentArtifacts'), /QueueBox: outboxPoller: its timeout \(custom\.queuebox\.functions\.outboxPoller\.timeout: 6 s\)/);
  });

  it('warns about an HTTP route without authentication', () => {
    assert.deepEqual(deployWarnings(parseConfig({ inbox: { sources: { hook: { type: 'http', path: '/hook', auth: { type: 'none' } } } } })), ['inbox source hook has auth: none: its route POST /inbox/hook accepts requests from anyone']);
    assert.deepEqual(deployWarnings(parseConfig({ inbox: { sources: { hook: { type: 'http', path: '/hook', auth: { type: 'hmac', secretEnv: 'HOOK_SECRET' }, idempotencyKeyPath: '$.id' } } } })), []);
  });

  it('warns about an sqs source on a FIFO queue without aggregateIdPath: its rows would lose the message groups\' order', () => {
    const sqs = (source: Record<string, unknown>) => deployWarnings(parseConfig({ inbox: { sources: { orders: { type: 'sqs', idempotencyKeyPath: '$.id', ...source } } } }));
    assert.deepEqual(sqs({ queueName: 'orders.fifo' }), [
      "inbox source orders reads the FIFO queue orders.fifo but has no aggregateIdPath: its rows have no aggregate (MessageGroupId is not read), so they are relayed and delivered in parallel and the queue's order per message group is lost. Set aggregateIdPath to the body field the MessageGroupId is made from",
    ]);
    assert.match(sqs({ queueName: 'jobs.fifo', consumption: 'pull' })[0]!, /^inbox source orders reads the FIFO queue jobs\.fifo .* claimed by pull workers in parallel/);
    assert.deepEqual(sqs({ queueName: 'orders.fifo', aggregateIdPath: '$.orderId' }), []);
    assert.deepEqual(sqs({ queueName: 'orders' }), [], 'a standard queue keeps no order to lose');
    assert.deepEqual(sqs({}), []);
  });

  it('refuses a destination region that is not a region name (it enters IAM ARNs)', () => {
    const destination = (region: string) => ({ destinations: { q: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders', region } }, outbox: { routes: [{ topicPattern: '**', destination: 'q' }] } });
    assert.throws(() => parseConfig(destination('*')), /destinations\.q\.region: must be an AWS region name/);
    assert.throws(() => parseConfig(destination('eu-west-*')), /destinations\.q\.region/);
    assert.equal((parseConfig(destination('us-gov-west-1')).destinations.q as { region?: string }).region, 'us-gov-west-1');
  });

  it('finds esbuild in the service, and names the command to install it when it is missing', async () => {
    assert.equal(typeof (await loadEsbuild(process.cwd(), join(service, 'x.js'))).build, 'function');
    await assert.rejects(loadEsbuild(service, join(service, 'x.js')), new RegExp(`esbuild, which is not installed in ${service}: npm install -D esbuild`));
  });

  it('initialize adds queuebox<Name> functions with their own runtime, role and package, beside the service\'s', async () => {
    const { serverless, hook } = pluginFor({ config: 'queuebox.yml', functions: { outboxPoller: { timeout: 45, reservedConcurrency: 2 } } });
    await hook('initialize');
    const functions = serverless.service.functions;
    assert.deepEqual(Object.keys(functions), ['hello', ...FUNCTIONS.map((f) => functionKey(f.name))]);
    const poller = functions.queueboxOutboxPoller!;
    assert.deepEqual([poller.name, poller.handler, poller.runtime, poller.architecture, poller.role], ['shop-dev-queueboxOutboxPoller', '.queuebox/outboxPoller/index.handler', 'nodejs24.x', 'arm64', 'QueueBoxRoleOutboxPoller']);
    assert.deepEqual([poller.timeout, poller.memorySize, poller.reservedConcurrency, poller.maximumRetryAttempts], [45, 512, 2, 0]);
    assert.deepEqual(poller.package, { individually: true, patterns: ['!**', '.queuebox/outboxPoller/**', '.queuebox/queuebox.yml'] });
    assert.equal(poller.skipEsbuild, true, 'serverless-esbuild in the service does not bundle it again (its handler is built only when packaging)');
    assert.deepEqual(functions.queueboxInboxHttp!.events, [{ httpApi: { method: 'POST', path: '/inbox/hook' } }]);
    assert.deepEqual(serverless.service.package.patterns, ['!.queuebox/**'], 'the service\'s own package leaves the bundles out');
  });

  it('spells each QueueBox function\'s exclude-all unlike every service pattern, which osls would merge it into', async () => {
    const { serverless, hook } = pluginFor({ config: 'queuebox.yml' });
    serverless.service.package.patterns = ['!**', '!**/**', 'src/**'];
    await hook('initialize');
    const poller = serverless.service.functions.queueboxOutboxPoller!;
    assert.deepEqual(poller.package, { individually: true, patterns: ['!**/**/**', '.queuebox/outboxPoller/**', '.queuebox/queuebox.yml'] });
    assert.deepEqual(serverless.service.package.patterns, ['!**', '!**/**', 'src/**', '!.queuebox/**']);
  });

  it('stops on a service pattern that names the build folder, which would take a QueueBox function\'s include from its zip', async () => {
    for (const pattern of ['.queuebox/outboxPoller/**', '!.queuebox/queuebox.yml', './.queuebox/**', '.queuebox']) {
      const { serverless, hook } = pluginFor({ config: 'queuebox.yml' });
      serverless.service.package.patterns = ['src/**', pattern];
      await assert.rejects(hook('initialize'), (error: Error) => error.message.startsWith(`QueueBox: package.patterns: '${pattern}' names .queuebox/`), pattern);
    }
    const { serverless, hook } = pluginFor({ config: 'queuebox.yml' });
    serverless.service.package.patterns = ['src/**', '!.queuebox/**', '.queueboxes/**'];
    await hook('initialize');
    assert.deepEqual(serverless.service.package.patterns, ['src/**', '!.queuebox/**', '.queueboxes/**', '!.queuebox/**']);
  });

  it('warns when serverless-esbuild packages the service\'s own functions without package.individually', () => {
    const warning = serverlessEsbuildWarning({ plugins: ['queuebox/serverless', 'serverless-esbuild'] }, ['hello']);
    assert.match(warning ?? '', /^serverless-esbuild is among the plugins and package\.individually is not true: .* hello would each carry every QueueBox bundle \(\.queuebox\/\); set package\.individually: true$/);
    assert.equal(serverlessEsbuildWarning({ plugins: { modules: ['serverless-esbuild'] } }, ['hello']), warning, 'plugins.modules too');
    assert.equal(serverlessEsbuildWarning({ plugins: ['serverless-esbuild'], package: { individually: true } }, ['hello']), undefined);
    assert.equal(serverlessEsbuildWarning({ plugins: ['serverless-esbuild'] }, []), undefined, 'no function of the service\'s own');
    assert.equal(serverlessEsbuildWarning({ plugins: ['queuebox/serverless'] }, ['hello']), undefined);
  });

  it('keeps provider.tracing off QueueBox\'s functions when observability.tracing is off (their roles grant no X-Ray)', async () => {
    const traced = pluginFor({});
    traced.serverless.service.provider.tracing = { lambda: true };
    await traced.hook('initialize');
    for (const fn of FUNCTIONS) assert.equal(traced.serverless.service.functions[functionKey(fn.name)]!.tracing, 'PassThrough', fn.name);
    const untraced = pluginFor({});
    await untraced.hook('initialize');
    assert.equal('tracing' in untraced.serverless.service.functions.queueboxOutboxPoller!, false, 'no tracing setting: osls would grant the service\'s role X-Ray');
  });

  it('stops on a deployed function name longer than Lambda accepts, naming it and the room left; 64 characters pass', async () => {
    const long = pluginFor({});
    long.serverless.service.service = 's'.repeat(40);
    // 40 + 1 + 3 (dev) + 1 + 20 (queueboxOutboxPoller) = 65
    // The prefix once: the step's own message carries none, `fail` adds it.
    await assert.rejects(long.hook('initialize'), (e: Error) =>
      /^QueueBox: the function name s{40}-dev-queueboxOutboxPoller is 65 characters; Lambda accepts at most 64: the service name and stage together may have at most 42 characters \(now 43/.test(e.message),
    );
    const fits = pluginFor({});
    fits.serverless.service.service = 's'.repeat(39);
    await fits.hook('initialize');
    assert.equal((fits.serverless.service.functions.queueboxOutboxPoller as { name: string }).name.length, 64);
  });

  it('stops on a function name the service already has, refuses to package without a database location before bundling, and builds nothing for the service\'s own function', async () => {
    const taken = pluginFor({}, { queueboxMigrate: { handler: 'mine.handler' } });
    await assert.rejects(taken.hook('initialize'), /QueueBox: the service already has a function queueboxMigrate/);
    const { hook, warnings } = pluginFor({});
    await hook('initialize');
    await assert.rejects(hook('before:package:createDeploymentArtifacts'), /QueueBox: stage dev has no database location/);
    assert.deepEqual(warnings, []);
    const own = pluginFor({}, undefined, { function: 'hello' });
    await own.hook('initialize');
    await own.hook('before:invoke:local:invoke');
    await own.hook('before:deploy:function:packageFunction');
    assert.equal(existsSync(join(service, '.queuebox')), false, 'the service\'s own function builds nothing of QueueBox\'s');
  });
});
