/**
 * What the plugin does to the compiled template, without packaging: the plugin on a stand-in for
 * osls's `serverless` object whose template holds what osls's compilers leave there by
 * `after:package:compileEvents` (QueueBox's functions, with or without `VpcConfig`; the HTTP API
 * routes, with or without the stage; `provider.vpc` set to `{}` as osls's function compiler does).
 * Covers the VPC access policy, a shared HTTP API's stage, a queue shared with the service's own
 * function, and the refusal of `database.urlEnv` beside a database secret or parameter.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig, parseConfig } from '../../lib/config/load-config.ts';
import { deployRefusal, httpApiRouteLogicalId, providerEnvironmentProblems, sharedQueueWarnings, triggerNameClashes } from '../../lib/serverless/deploy-checks.ts';
import { FUNCTIONS, functionLogicalId } from '../../lib/serverless/functions.ts';
import QueueBoxServerlessPlugin from '../../lib/serverless/index.ts';
import { parsePluginOptions } from '../../lib/serverless/options.ts';
import { roleLogicalId } from '../../lib/serverless/roles.ts';
import { buildStackFragment } from '../../lib/serverless/stack.ts';
import { extendTemplate, functionsInVpc, type Template } from '../../lib/serverless/template.ts';

const service = mkdtempSync(join(tmpdir(), 'qb-plugin-template-'));
const QUEUEBOX_YML = `inbox:
  sources:
    stripe: { type: http, path: /stripe, auth: { type: stripe, secretEnv: STRIPE_WEBHOOK_SECRET } }
    partner: { type: sqs, queueName: partner-events }
`;
writeFileSync(join(service, 'queuebox.yml'), QUEUEBOX_YML);
writeFileSync(join(service, 'urlenv.yml'), `${QUEUEBOX_YML}database:\n  urlEnv: APP_DB_URL\n`);

const VPC_CONFIG = { SecurityGroupIds: ['sg-1'], SubnetIds: ['subnet-1', 'subnet-2'] };
const stripeRoute = { Type: 'AWS::ApiGatewayV2::Route', Properties: { ApiId: 'abc123defg', RouteKey: 'POST /inbox/stripe' } };

/** The template as osls's compilers leave it: QueueBox's functions (in a VPC or not), and the stage unless the HTTP API is an existing one. */
function compiledTemplate(options: { vpc: boolean; stage: boolean }): Template {
  const resources: Template['Resources'] = { HttpApiRoutePostInboxStripe: structuredClone(stripeRoute) };
  for (const fn of FUNCTIONS) resources[functionLogicalId(fn.name)] = { Type: 'AWS::Lambda::Function', Properties: options.vpc ? { VpcConfig: VPC_CONFIG } : {} };
  if (options.stage) resources.HttpApiStage = { Type: 'AWS::ApiGatewayV2::Stage', Properties: { ApiId: { Ref: 'HttpApi' }, StageName: '$default' } };
  return { Resources: resources };
}

/** A plugin on a stand-in for osls's `serverless` object: `initialize` run, then `after:package:compileEvents` on `template`. */
async function pluginFor(custom: Record<string, unknown>, template: Template, functions: Record<string, Record<string, unknown>> = { hello: { handler: 'handler.hello' } }, provider: Record<string, unknown> = {}) {
  const serverless = {
    serviceDir: service,
    service: { service: 'shop', provider: { ...provider, compiledCloudFormationTemplate: template } as Record<string, unknown>, functions, custom: { queuebox: { databaseUrlParameter: '/shop/dev/database-url', ...custom } }, package: {} },
    getProvider: () => ({ getStage: () => 'dev', getRegion: () => 'eu-west-1' }),
    classes: { Error },
  };
  const warnings: string[] = [];
  const plugin = new QueueBoxServerlessPlugin(serverless as never, {}, { log: { notice: () => {}, info: () => {}, warning: (m: string) => warnings.push(m) } });
  await plugin.hooks.initialize!();
  // What osls's function compiler does to a service without a VPC (compile/functions.js).
  serverless.service.provider.vpc ??= {};
  return { warnings, compileEvents: () => plugin.hooks['after:package:compileEvents']!(), packaging: () => plugin.hooks['before:package:createDeploymentArtifacts']!() };
}

/** The managed policies a QueueBox role gets once the stack's parameters take their defaults. */
function managedPolicies(template: Template, role: string): unknown {
  const arns = template.Resources[role]!.Properties!.ManagedPolicyArns as { 'Fn::If': [string, unknown, unknown] };
  assert.equal(arns['Fn::If'][0], 'QueueBoxVpcAccess');
  assert.deepEqual(template.Conditions!.QueueBoxVpcAccess, { 'Fn::Equals': [{ Ref: 'QueueBoxVpcAccessParam' }, 'true'] });
  const access = (template.Parameters!.QueueBoxVpcAccessParam as { Default: string }).Default === 'true';
  return access ? arns['Fn::If'][1] : arns['Fn::If'][2];
}

describe('the plugin on the compiled template', { timeout: 30_000 }, () => {
  after(() => rmSync(service, { recursive: true, force: true }));

  it('attaches AWSLambdaVPCAccessExecutionRole to no role when no function is in a VPC, though osls has set provider.vpc to {}', async () => {
    const template = compiledTemplate({ vpc: false, stage: true });
    await (await pluginFor({}, template)).compileEvents();
    assert.equal((template.Parameters!.QueueBoxVpcAccessParam as { Default: string }).Default, 'false');
    for (const fn of FUNCTIONS) assert.deepEqual(managedPolicies(template, roleLogicalId(fn.name)), { Ref: 'AWS::NoValue' }, fn.name);
  });

  it('attaches it to every role when the functions run in a VPC; vpcAccess overrides either way', async () => {
    const inVpc = compiledTemplate({ vpc: true, stage: true });
    await (await pluginFor({}, inVpc)).compileEvents();
    assert.equal((inVpc.Parameters!.QueueBoxVpcAccessParam as { Default: string }).Default, 'true');
    for (const fn of FUNCTIONS) assert.match(JSON.stringify(managedPolicies(inVpc, roleLogicalId(fn.name))), /:iam::aws:policy\/service-role\/AWSLambdaVPCAccessExecutionRole"/, fn.name);
    const refused = compiledTemplate({ vpc: true, stage: true });
    await (await pluginFor({ vpcAccess: false }, refused)).compileEvents();
    assert.equal((refused.Parameters!.QueueBoxVpcAccessParam as { Default: string }).Default, 'false');
    const forced = compiledTemplate({ vpc: false, stage: true });
    await (await pluginFor({ vpcAccess: 'true' }, forced)).compileEvents();
    assert.equal((forced.Parameters!.QueueBoxVpcAccessParam as { Default: string }).Default, 'true');
  });

  it('counts a function as in a VPC only with both subnets and security groups', () => {
    const ids = [functionLogicalId('migrate')];
    const withVpc = (VpcConfig: unknown): Template => ({ Resources: { [ids[0]!]: { Type: 'AWS::Lambda::Function', Properties: { VpcConfig } } } });
    assert.equal(functionsInVpc(withVpc(VPC_CONFIG), ids), true);
    assert.equal(functionsInVpc(withVpc({ SubnetIds: { 'Fn::Split': [',', { 'Fn::ImportValue': 'subnets' }] }, SecurityGroupIds: [{ Ref: 'Sg' }] }), ids), true, 'from intrinsic functions');
    assert.equal(functionsInVpc(withVpc({ SubnetIds: ['subnet-1'] }), ids), false);
    assert.equal(functionsInVpc(withVpc({ SubnetIds: [], SecurityGroupIds: [] }), ids), false);
    assert.equal(functionsInVpc({ Resources: { [ids[0]!]: { Type: 'AWS::Lambda::Function', Properties: {} } } }, ids), false);
  });

  it('throttles and logs the inbox routes on the service\'s own HTTP API stage, without a warning', async () => {
    const template = compiledTemplate({ vpc: false, stage: true });
    const { warnings, compileEvents } = await pluginFor({}, template);
    await compileEvents();
    assert.deepEqual(template.Resources.HttpApiStage!.Properties!.RouteSettings, { 'POST /inbox/stripe': { ThrottlingRateLimit: 100, ThrottlingBurstLimit: 200 } });
    assert.deepEqual(warnings, []);
  });

  it('warns that an existing HTTP API (no stage in the template) gets neither throttling nor an access log, naming the routes and what to do', async () => {
    const template = compiledTemplate({ vpc: false, stage: false });
    const { warnings, compileEvents } = await pluginFor({}, template);
    await compileEvents();
    assert.deepEqual(warnings, [
      'QueueBox: the inbox routes (POST /inbox/stripe) are on an existing HTTP API (provider.httpApi.id) whose stage this stack does not create: they get no throttling (custom.queuebox.httpApi) and no access log from QueueBox. ' +
        'Configure route throttling for POST /inbox/stripe and an access log on that API\'s stage',
    ]);
    assert.equal(template.Resources.QueueBoxHttpApiAccessLogs, undefined, 'no log group nothing writes to');
    const unlogged = await pluginFor({ httpApi: { accessLogs: false } }, compiledTemplate({ vpc: false, stage: false }));
    await unlogged.compileEvents();
    assert.match(unlogged.warnings[0]!, /they get no throttling \(custom\.queuebox\.httpApi\) from QueueBox\. Configure route throttling for POST \/inbox\/stripe on that API's stage$/);
  });

  it('refuses throttling set in custom.queuebox.httpApi that an existing HTTP API cannot get, naming the keys', async () => {
    const template = compiledTemplate({ vpc: false, stage: false });
    const { compileEvents } = await pluginFor({ httpApi: { throttlingRateLimit: 5, throttlingBurstLimit: 10 } }, template);
    await assert.rejects(
      compileEvents(),
      /^Error: QueueBox: custom\.queuebox\.httpApi\.throttlingRateLimit and custom\.queuebox\.httpApi\.throttlingBurstLimit cannot be applied: the inbox routes \(POST \/inbox\/stripe\) are on an existing HTTP API \(provider\.httpApi\.id\).*Remove .* and set route throttling for POST \/inbox\/stripe on that API's stage instead$/,
    );
    assert.equal(template.Resources.QueueBoxRoleMigrate, undefined, 'refused before the template is changed');
    const applied = compiledTemplate({ vpc: false, stage: true });
    await (await pluginFor({ httpApi: { throttlingRateLimit: 5 } }, applied)).compileEvents();
    assert.deepEqual(applied.Resources.HttpApiStage!.Properties!.RouteSettings, { 'POST /inbox/stripe': { ThrottlingRateLimit: 5, ThrottlingBurstLimit: 200 } });
  });

  it('says nothing of a stage when QueueBox has no HTTP route', () => {
    const config = parseConfig({ inbox: { sources: { partner: { type: 'sqs' } } } });
    const template: Template = { Resources: {} };
    const warnings = extendTemplate(template, {
      fragment: buildStackFragment(config, { service: 'shop', stage: 'dev' }),
      options: parsePluginOptions({ httpApi: { throttlingRateLimit: 5 } }),
      secretsParameterPath: '/queuebox/dev',
      vpcAccess: false,
      logRetentionInDays: 30,
      serviceResourceIds: new Set(),
      serviceSqsArns: [],
      explicitHttpApiThrottling: ['throttlingRateLimit'],
    });
    assert.deepEqual(warnings, []);
  });

  it('warns when the service\'s own function is triggered by an sqs source\'s queue, naming both', async () => {
    const template = compiledTemplate({ vpc: false, stage: true });
    const { warnings, compileEvents } = await pluginFor({}, template, {
      hello: { handler: 'handler.hello', events: [{ sqs: 'arn:aws:sqs:eu-west-1:123456789012:partner-events' }] },
      other: { handler: 'handler.other', events: [{ sqs: { arn: 'arn:aws:sqs:eu-west-1:123456789012:other-events', batchSize: 5 } }] },
    });
    await compileEvents();
    assert.deepEqual(warnings, [
      'QueueBox: inbox source partner\'s queue partner-events also triggers your function hello: Lambda splits the queue\'s messages between the two triggers, so the ones hello receives never reach the inbox. ' +
        'Give hello a queue of its own (an SNS topic or EventBridge rule can feed both queues)',
    ]);
  });

  it('recognises the queue in each form an sqs event gives its ARN, and not a queue of another name or region', () => {
    const config = parseConfig({ inbox: { sources: { partner: { type: 'sqs', queueName: 'partner-events' }, feed: { type: 'sqs' } } } });
    const resources = {
      PartnerQueue: { Type: 'AWS::SQS::Queue', Properties: { QueueName: 'partner-events' } },
      Unnamed: { Type: 'AWS::SQS::Queue', Properties: {} },
    };
    const warned = (arn: unknown, region?: string) => sharedQueueWarnings(config, [{ function: 'hello', arn }], resources, region).map((w) => /^inbox source (\w+)'s queue ([\w-]+) also triggers your function hello/.exec(w)?.slice(1).join(' '));
    assert.deepEqual(warned('arn:aws:sqs:eu-west-1:123456789012:partner-events', 'eu-west-1'), ['partner partner-events']);
    assert.deepEqual(warned('arn:aws:sqs:eu-west-1:123456789012:feed'), ['feed feed'], 'a source without queueName uses its own name');
    assert.deepEqual(warned({ 'Fn::GetAtt': ['PartnerQueue', 'Arn'] }), ['partner partner-events']);
    assert.deepEqual(warned({ 'Fn::GetAtt': 'PartnerQueue.Arn' }), ['partner partner-events']);
    assert.deepEqual(warned({ 'Fn::Sub': 'arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:partner-events' }, 'eu-west-1'), ['partner partner-events']);
    assert.deepEqual(warned({ 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':sqs:', { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, ':partner-events']] }), ['partner partner-events']);
    assert.deepEqual(warned({ 'Fn::Join': [':', ['arn', 'aws', 'sqs', 'eu-west-1', '123456789012', 'partner-events']] }), ['partner partner-events']);
    assert.deepEqual(warned('arn:aws:sqs:us-east-1:123456789012:partner-events', 'eu-west-1'), [], 'a queue of that name in another region');
    for (const other of ['arn:aws:sqs:eu-west-1:123456789012:partner-events-dlq', { 'Fn::GetAtt': ['Unnamed', 'Arn'] }, { 'Fn::ImportValue': 'partner-events-arn' }, { 'Fn::Join': ['', ['arn:aws:sqs:eu-west-1:', { Ref: 'Account' }, ':partner-events']] }]) {
      assert.deepEqual(warned(other, 'eu-west-1'), [], JSON.stringify(other));
    }
  });

  it('refuses database.urlEnv other than QUEUEBOX_DATABASE_URL beside a database secret or parameter, naming both keys and the fix', async () => {
    const config = parseConfig({ database: { urlEnv: 'APP_DB_URL' } });
    const parameter = deployRefusal(parsePluginOptions({ databaseUrlParameter: '/shop/dev/database-url' }), config, 'dev');
    assert.equal(
      parameter,
      'queuebox.yml sets database.urlEnv: APP_DB_URL while custom.queuebox.databaseUrlParameter is set: the functions put the connection string they read from it into QUEUEBOX_DATABASE_URL, ' +
        'but database.urlEnv makes them look for APP_DB_URL, so every function would fail at cold start. Remove database.urlEnv from queuebox.yml (or set it to QUEUEBOX_DATABASE_URL)',
    );
    const secret = deployRefusal(parsePluginOptions({ databaseSecretArn: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:db' }), parseConfig({ database: { urlEnv: 'DATABASE_URL' } }), 'dev')!;
    assert.match(secret, /^queuebox\.yml sets database\.urlEnv: DATABASE_URL while custom\.queuebox\.databaseSecretArn is set/);
    assert.equal(deployRefusal(parsePluginOptions({ databaseUrlParameter: '/shop/dev/database-url' }), parseConfig({ database: { urlEnv: 'QUEUEBOX_DATABASE_URL' } }), 'dev'), undefined, 'the variable the functions fill');
    assert.equal(deployRefusal(parsePluginOptions({}), config, 'dev'), undefined, 'urlEnv alone: the functions get the variable some other way');
    // Through the plugin: before anything is bundled.
    const { packaging } = await pluginFor({ config: 'urlenv.yml' }, compiledTemplate({ vpc: false, stage: true }));
    await assert.rejects(packaging(), /^Error: QueueBox: urlenv\.yml sets database\.urlEnv: APP_DB_URL while custom\.queuebox\.databaseUrlParameter is set/);
  });
});

describe('packaging refuses what would fail only after deploy', { timeout: 30_000 }, () => {
  // The service directory again: the suites above remove it when they end.
  before(() => {
    mkdirSync(service, { recursive: true });
    writeFileSync(join(service, 'queuebox.yml'), QUEUEBOX_YML);
  });
  after(() => rmSync(service, { recursive: true, force: true }));
  const sqs = (queueName: string) => ({ type: 'sqs' as const, queueName });
  const http = (path: string) => ({ type: 'http' as const, path, auth: { type: 'none' as const } });

  it('inbox sources whose queues or routes the Serverless Framework would give one logical id, naming both', () => {
    const clashes = (sources: Record<string, unknown>, serviceRoutes: string[] = []) => triggerNameClashes(parseConfig({ inbox: { sources } }), serviceRoutes);
    const [dashUnderscore] = clashes({ a: sqs('q-1'), b: sqs('q_1') });
    assert.match(dashUnderscore!, /^inbox source a \(queue q-1\) and inbox source b \(queue q_1\) would get one SQS trigger: .*\(Q1\).*never read/);
    assert.match(clashes({ lower: sqs('orders'), upper: sqs('Orders') })[0]!, /inbox source lower \(queue orders\) and inbox source upper \(queue Orders\) would get one SQS trigger/);
    assert.match(clashes({ a: http('/hooka'), b: http('/hook_a') })[0]!, /^inbox source a \(route POST \/inbox\/hooka\) and inbox source b \(route POST \/inbox\/hook_a\) would be one route \(HttpApiRoutePostInboxHooka\)/);
    assert.match(clashes({ a: http('/Hook'), b: http('/hook') })[0]!, /would be one route \(HttpApiRoutePostInboxHook\)/);
    assert.match(clashes({ a: http('/hooka') }, ['POST /inbox/hook.a'])[0]!, /^inbox source a \(route POST \/inbox\/hooka\) and the service's route POST \/inbox\/hook\.a would be one route/);
    // Names that stay apart: '-' is 'Dash' in a route; different letters or digits; the same route as the service's is osls's own duplicate check.
    assert.deepEqual(clashes({ a: http('/hook-a'), b: http('/hooka'), c: sqs('q-1'), d: sqs('q-2') }, ['POST /inbox/hooka', 'GET /inbox/hook_a']), []);
    assert.equal(httpApiRouteLogicalId('POST /inbox/{id}/x-y'), 'HttpApiRoutePostInboxIdVarXDashy');
  });

  it('a QUEUEBOX_ override in provider.environment that the configuration refuses, and a database.urlEnv no function gets', () => {
    const options = parsePluginOptions({});
    const config = parseConfig({ database: { urlEnv: 'APP_DB_URL' } });
    const validate = (env: Record<string, string>) => loadConfig({ input: {}, env });
    const templateOf = (c: Parameters<typeof buildStackFragment>[0]) => buildStackFragment(c, { service: 'shop', stage: 'dev' });
    const [typo] = providerEnvironmentProblems(options, config, { APP_DB_URL: 'postgres://db/app', QUEUEBOX_OUTBOX__BATCH_SIZ: '50' }, validate, templateOf);
    assert.match(typo!, /^provider\.environment, which every QueueBox function gets, would stop each one at cold start: .*outbox\.batchSiz \(from QUEUEBOX_OUTBOX__BATCH_SIZ\): unknown key/s);
    assert.match(providerEnvironmentProblems(options, config, { APP_DB_URL: 'x', QUEUEBOX_OUTBOX__BATCH_SIZE: 'fifty' }, validate, templateOf)[0]!, /QUEUEBOX_OUTBOX__BATCH_SIZE/);
    assert.deepEqual(providerEnvironmentProblems(options, config, { APP_DB_URL: 'x', QUEUEBOX_OUTBOX__BATCH_SIZE: '50', QUEUEBOX_DATABASE_URL: 'not checked: the functions fill it', OTHER: 'y' }, validate, templateOf), []);
    const [noUrl] = providerEnvironmentProblems(options, config, {}, validate, templateOf);
    assert.match(noUrl!, /^queuebox\.yml sets database\.urlEnv: APP_DB_URL, the only database location of this stage, but provider\.environment does not set APP_DB_URL/);
    assert.deepEqual(providerEnvironmentProblems(parsePluginOptions({ allowMissingDatabase: true }), config, {}, validate, templateOf), [], 'the opt-out');
    assert.deepEqual(providerEnvironmentProblems(options, config, { APP_DB_URL: { 'Fn::GetAtt': ['Db', 'Url'] } }, validate, templateOf), [], 'set at deploy time');
  });

  it('overrides in provider.environment that change the packaged stack, read together as the functions read them', () => {
    const options = parsePluginOptions({});
    const input = {
      destinations: { orders: { type: 'sqs' as const, queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders' } },
      inbox: { sources: { partner_orders: { type: 'sqs' as const } } },
    };
    const config = parseConfig(input);
    const validate = (env: Record<string, string>) => loadConfig({ input, env });
    const templateOf = (c: Parameters<typeof buildStackFragment>[0]) => buildStackFragment(c, { service: 'shop', stage: 'dev' });
    const problems = (env: Record<string, string>) => providerEnvironmentProblems(options, config, env, validate, templateOf);
    const [changed, ...more] = problems({
      QUEUEBOX_OBSERVABILITY__SERVICE_NAME: 'orders-prod',
      QUEUEBOX_OBSERVABILITY__NAMESPACE: 'Shop',
      QUEUEBOX_TABLES__OUTBOX: 'shop_outbox',
      QUEUEBOX_DESTINATIONS__ORDERS__QUEUE_URL: 'https://sqs.eu-west-1.amazonaws.com/123456789012/other',
      QUEUEBOX_OUTBOX__BATCH_SIZE: '50',
    });
    assert.deepEqual(more, []);
    assert.match(
      changed!,
      /^provider\.environment sets QUEUEBOX_OBSERVABILITY__SERVICE_NAME, QUEUEBOX_OBSERVABILITY__NAMESPACE, QUEUEBOX_TABLES__OUTBOX, QUEUEBOX_DESTINATIONS__ORDERS__QUEUE_URL, which the functions read, but the dashboard, alarms, IAM grants, triggers and routes are built from queuebox\.yml.* Set their keys in queuebox\.yml instead$/,
      'each one that changes the stack is named; the batch size does not change it',
    );
    // Scale-out grants the poller the right to invoke itself: built from the file.
    assert.match(problems({ QUEUEBOX_OUTBOX__SCALE_OUT__MAX_CONCURRENT_PASSES: '4' })[0]!, /^provider\.environment sets QUEUEBOX_OUTBOX__SCALE_OUT__MAX_CONCURRENT_PASSES, which .* Set its key in queuebox\.yml instead$/);
    // Settings that leave the stack as packaged: one stage's own values, as docs/operations.md shows.
    const unchanged: Array<Record<string, string>> = [
      { QUEUEBOX_OBSERVABILITY__SERVICE_NAME: 'queuebox' },
      { QUEUEBOX_DESTINATIONS__ORDERS__CALL_TIMEOUT_MS: '20000' },
      { QUEUEBOX_DESTINATIONS__ORDERS__ENDPOINT: 'https://sqs.eu-west-1.amazonaws.com' },
      { QUEUEBOX_INBOX__SOURCES__PARTNER_ORDERS__CONSUMPTION: 'pull' },
      // Valid together only, as the functions read them.
      { QUEUEBOX_OUTBOX__POLL_INTERVAL_MS: '2000', QUEUEBOX_OUTBOX__MAX_POLL_INTERVAL_MS: '5000' },
      { QUEUEBOX_OUTBOX__BATCH_SIZE: '20', QUEUEBOX_OUTBOX__MAX_BATCH_SIZE: '50' },
    ];
    for (const env of unchanged) assert.deepEqual(problems(env), [], JSON.stringify(env));
    // A value the configuration takes but the stack cannot be built from is named as the environment's.
    assert.match(
      problems({ QUEUEBOX_DESTINATIONS__ORDERS__QUEUE_URL: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders*' })[0]!,
      /^provider\.environment, which every QueueBox function gets, sets a value the stack cannot be built from: /,
    );
  });

  it('through the plugin: packaging stops, naming the clash and the variable', async () => {
    const clashing = join(service, 'clash.yml');
    writeFileSync(clashing, `inbox:\n  sources:\n    a: { type: sqs, queueName: q-1 }\n    b: { type: sqs, queueName: q_1 }\n`);
    await assert.rejects((await pluginFor({ config: 'clash.yml' }, compiledTemplate({ vpc: false, stage: true }))).packaging(), /^Error: QueueBox: inbox source a \(queue q-1\) and inbox source b \(queue q_1\) would get one SQS trigger/);
    const typo = await pluginFor({}, compiledTemplate({ vpc: false, stage: true }), undefined, { environment: { QUEUEBOX_OUTBOX__BATCH_SIZ: '50' } });
    await assert.rejects(typo.packaging(), /^Error: QueueBox: provider\.environment, .*QUEUEBOX_OUTBOX__BATCH_SIZ/s);
  });
});

