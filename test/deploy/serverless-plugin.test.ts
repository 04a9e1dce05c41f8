/**
 * QueueBox inside a team's own Serverless service, as the team gets it: the packed package, osls
 * and esbuild installed into a scratch service that has its own Python function and HTTP route,
 * `plugins: [queuebox/serverless]` and `custom.queuebox`. `osls package` there (QueueBox's
 * functions next to the service's, nothing colliding, cfn-lint clean), then `osls invoke local` of
 * QueueBox's migrate and poller against a fresh schema, with nothing inherited but PATH and HOME.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { FUNCTIONS, functionKey, functionLogicalId } from '../../lib/serverless/functions.ts';
import { testDatabaseUrl } from '../helpers/database.ts';
import { explain, npmInstall, packedTarball, run, type Run } from '../helpers/packed-package.ts';
import { zipEntries } from '../helpers/zip-entries.ts';

type Resource = { Type: string; Properties: Record<string, unknown>; DependsOn?: string[] };
const devDependencies = (JSON.parse(readFileSync('package.json', 'utf8')) as { devDependencies: Record<string, string> }).devDependencies;

const SERVICE_YML = `service: shop
frameworkVersion: '>=3'
plugins:
  - queuebox/serverless
params:
  default:
    databaseUrlParameter: ''
  test:
    databaseUrlParameter: /shop/test/database-url
provider:
  name: aws
  runtime: python3.12
  region: eu-west-1
package:
  patterns: ['!node_modules/**']
functions:
  hello:
    handler: handler.hello
    events:
      - httpApi: { method: GET, path: /hello }
custom:
  queuebox:
    config: queuebox.yml
    databaseUrlParameter: \${param:databaseUrlParameter}
    functions:
      outboxPoller: { timeout: 7, reservedConcurrency: 2 }
`;

const QUEUEBOX_YML = `destinations:
  events: { type: eventbridge, eventBusName: app-bus, source: com.example.shop }
outbox:
  routes:
    - { topicPattern: '**', destination: events }
  scaleOut: { maxConcurrentPasses: 4 }
inbox:
  sources:
    stripe: { type: http, path: /stripe, auth: { type: stripe, secretEnv: STRIPE_WEBHOOK_SECRET } }
    partner: { type: sqs, queueName: partner-events }
`;

/** The JSON value osls prints last (the handler's result or error; log lines before it are one-line JSON). */
function lastResult(stdout: string): Record<string, unknown> {
  const start = stdout.lastIndexOf('\n{\n');
  return JSON.parse(start >= 0 ? stdout.slice(start + 1) : stdout.slice(stdout.indexOf('{\n'))) as Record<string, unknown>;
}

describe('plugins: [queuebox/serverless] in a scratch service', { timeout: 600_000 }, () => {
  let work: string;
  let service: string;
  let schema: string;
  let env: NodeJS.ProcessEnv;
  let packaged: Run;
  let resources: Record<string, Resource>;
  const osls = (args: string[], extraEnv: NodeJS.ProcessEnv = {}) => run(process.execPath, ['node_modules/osls/bin/serverless.js', ...args], { cwd: service, env: { ...env, ...extraEnv }, timeoutMs: 240_000 });

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'qb-plugin-'));
    service = join(work, 'shop');
    mkdirSync(service);
    writeFileSync(join(service, 'package.json'), JSON.stringify({ name: 'shop', private: true }));
    writeFileSync(join(service, 'serverless.yml'), SERVICE_YML);
    writeFileSync(join(service, 'queuebox.yml'), QUEUEBOX_YML);
    writeFileSync(join(service, 'handler.py'), 'def hello(event, context):\n    return {"statusCode": 200, "body": "hello"}\n');
    await npmInstall(service, [await packedTarball()]);
    await npmInstall(service, ['-D', `osls@${devDependencies.osls}`, `esbuild@${devDependencies.esbuild}`]);
    schema = `qb_plugin_${randomBytes(5).toString('hex')}`;
    // Only what a shell gives: no DATABASE_URL or QUEUEBOX_* from the test run.
    env = { PATH: process.env.PATH, HOME: process.env.HOME, SLS_TELEMETRY_DISABLED: '1', SLS_NOTIFICATIONS_MODE: 'off', AWS_ACCESS_KEY_ID: 'local', AWS_SECRET_ACCESS_KEY: 'local' };
    packaged = await osls(['package', '--stage', 'test']);
    assert.equal(packaged.code, 0, explain(packaged));
    resources = (JSON.parse(readFileSync(join(service, '.serverless/cloudformation-template-update-stack.json'), 'utf8')) as { Resources: Record<string, Resource> }).Resources;
  }, { timeout: 480_000 });
  after(async () => {
    const admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).finally(() => admin.end());
    rmSync(work, { recursive: true, force: true });
  });

  it('packages the service function and QueueBox\'s side by side: own runtime, architecture, role and names', () => {
    const functions = Object.entries(resources).filter(([, r]) => r.Type === 'AWS::Lambda::Function');
    assert.deepEqual(functions.map(([id]) => id).sort(), ['HelloLambdaFunction', ...FUNCTIONS.map((f) => functionLogicalId(f.name))].sort());
    assert.equal(resources.HelloLambdaFunction!.Properties.Runtime, 'python3.12', 'the service keeps its provider settings');
    assert.deepEqual(resources.HelloLambdaFunction!.Properties.Role, { 'Fn::GetAtt': ['IamRoleLambdaExecution', 'Arn'] });
    for (const fn of FUNCTIONS) {
      const props = resources[functionLogicalId(fn.name)]!.Properties;
      assert.deepEqual([props.Runtime, props.Architectures, props.FunctionName], ['nodejs24.x', ['arm64'], `shop-test-${functionKey(fn.name)}`]);
      assert.deepEqual(props.Role, { 'Fn::GetAtt': [`QueueBoxRole${fn.name.charAt(0).toUpperCase()}${fn.name.slice(1)}`, 'Arn'] });
      const logs = JSON.stringify(resources[`QueueBoxRole${fn.name.charAt(0).toUpperCase()}${fn.name.slice(1)}`]!.Properties.Policies);
      assert.ok(logs.includes(`:log-group:/aws/lambda/shop-test-${functionKey(fn.name)}:*`), `${fn.name} writes its own deployed log group`);
      assert.equal((props.Environment as { Variables: Record<string, string> }).Variables.QUEUEBOX_DATABASE_URL_PARAMETER, '/shop/test/database-url');
    }
    assert.match(packaged.stderr + packaged.stdout, /queueboxInboxHttp reads these SSM SecureStrings at cold start: \/queuebox\/test\/STRIPE_WEBHOOK_SECRET/);
  });

  it('adds only logical ids of its own, and dashboard and alarms name the deployed functions', () => {
    const serviceIds = new Set(['ServerlessDeploymentBucket', 'ServerlessDeploymentBucketPolicy', 'HelloLogGroup', 'IamRoleLambdaExecution', 'HttpApi', 'HttpApiStage', 'HelloLambdaPermissionHttpApi', 'HttpApiIntegrationHello', 'HttpApiRouteGetHello']);
    // osls names a route by its method and path, and a function's resources by its key.
    const foreign = Object.keys(resources).filter((id) => !serviceIds.has(id) && !/^HelloLambda(Function|Version)/.test(id) && !/^(Queuebox|QueueBox)|Queuebox(InboxHttp)$/.test(id) && id !== 'HttpApiRoutePostInboxStripe');
    assert.deepEqual(foreign, [], 'every other resource is named for QueueBox');
    assert.ok(Object.keys(resources).some((id) => id === 'HttpApiRoutePostInboxStripe'), 'QueueBox\'s route is on the service\'s HTTP API');
    const dashboard = JSON.stringify(resources.QueueBoxDashboard!.Properties.DashboardBody);
    for (const fn of FUNCTIONS) assert.ok(dashboard.includes(`{"Ref":"${functionLogicalId(fn.name)}"}`), `dashboard shows ${fn.name}`);
    const errors = resources.QueueBoxAlarmOutboxPollerErrors!.Properties.Dimensions;
    assert.deepEqual(errors, [{ Name: 'FunctionName', Value: { Ref: 'QueueboxOutboxPollerLambdaFunction' } }]);
  });

  it('throttles and logs QueueBox\'s HTTP routes only, and keeps its trigger queue out of the service\'s role', () => {
    const stage = resources.HttpApiStage!;
    assert.deepEqual(stage.Properties.RouteSettings, { 'POST /inbox/stripe': { ThrottlingRateLimit: 100, ThrottlingBurstLimit: 200 } });
    assert.equal((stage.Properties.DefaultRouteSettings as Record<string, unknown>).ThrottlingRateLimit, undefined, 'the service\'s own routes are not throttled');
    assert.ok(stage.DependsOn?.includes('HttpApiRoutePostInboxStripe'), 'the stage is created after the route it configures');
    assert.deepEqual((stage.Properties.AccessLogSettings as { DestinationArn: unknown }).DestinationArn, { 'Fn::GetAtt': ['QueueBoxHttpApiAccessLogs', 'Arn'] });
    assert.ok(!JSON.stringify(resources.IamRoleLambdaExecution).includes('partner-events'), 'the service\'s functions cannot read partner-events');
    assert.ok(JSON.stringify(resources.QueueBoxRoleInboxSqs).includes(':partner-events'));
  });

  it('ships each QueueBox function only its own bundle, and the service\'s package none of them', () => {
    for (const fn of FUNCTIONS) {
      const shipped = zipEntries(join(service, `.serverless/${functionKey(fn.name)}.zip`));
      assert.deepEqual(shipped.filter((f) => !f.startsWith(`.queuebox/${fn.name}/`)), ['.queuebox/queuebox.yml'], `${fn.name}: nothing of another function`);
      for (const file of ['index.js', 'index.js.map', 'package.json']) assert.ok(shipped.includes(`.queuebox/${fn.name}/${file}`), `${fn.name} ships ${file}`);
    }
    assert.deepEqual(zipEntries(join(service, '.serverless/shop.zip')).filter((f) => !['handler.py', 'package.json', 'package-lock.json', 'queuebox.yml'].includes(f)), []);
  });

  it('lets the poller, whose scale-out is on, invoke itself only, capped at its reserved concurrency', () => {
    type Statement = { Action: string[]; Resource: Array<{ 'Fn::Join': [string, unknown[]] }> };
    const statements = (role: string) =>
      (resources[role]!.Properties.Policies as Array<{ PolicyDocument: { Statement: Statement[] } }>).flatMap((p) => p.PolicyDocument.Statement).filter((s) => s.Action?.includes('lambda:InvokeFunction'));
    const [invoke, ...others] = statements('QueueBoxRoleOutboxPoller');
    assert.equal(others.length, 0);
    assert.deepEqual(invoke!.Resource.map((r) => r['Fn::Join'][1].map((p) => (typeof p === 'string' ? p : `<${(p as { Ref: string }).Ref}>`)).join('')), [
      'arn:<AWS::Partition>:lambda:<AWS::Region>:<AWS::AccountId>:function:shop-test-queueboxOutboxPoller',
      'arn:<AWS::Partition>:lambda:<AWS::Region>:<AWS::AccountId>:function:shop-test-queueboxOutboxPoller:*',
    ]);
    for (const fn of FUNCTIONS.filter((f) => f.name !== 'outboxPoller')) assert.deepEqual(statements(`QueueBoxRole${fn.name.charAt(0).toUpperCase()}${fn.name.slice(1)}`), [], `${fn.name} invokes nothing`);
    const variables = (resources.QueueboxOutboxPollerLambdaFunction!.Properties.Environment as { Variables: Record<string, string> }).Variables;
    assert.equal(variables.QUEUEBOX_OUTBOX__SCALE_OUT__MAX_CONCURRENT_PASSES, '2');
    assert.equal(resources.QueueboxOutboxPollerLambdaFunction!.Properties.ReservedConcurrentExecutions, 2);
    assert.match(packaged.stderr + packaged.stdout, /outbox\.scaleOut\.maxConcurrentPasses is 4 but outboxPoller has a reserved concurrency of 2/);
  });

  it('passes cfn-lint with zero errors, and no warning about a resource of QueueBox\'s', async () => {
    const lint = await run('cfn-lint', [join(service, '.serverless/cloudformation-template-update-stack.json')], { cwd: service, timeoutMs: 120_000 });
    // Exit status bits: 1 fatal, 2 errors, 4 warnings, 8 informational.
    assert.equal(lint.code & 3, 0, `cfn-lint errors:\n${lint.stdout}${lint.stderr}`);
    // One finding per paragraph: its rule and message, then the file and line.
    const ours = lint.stdout.split(/\n\s*\n/).filter((finding) => /^W\d/.test(finding.trim()) && /Queue[Bb]ox|HttpApiRoutePostInbox/.test(finding));
    assert.deepEqual(ours, [], 'cfn-lint warns about QueueBox\'s resources');
  });

  it('`osls invoke local -f queueboxOutboxPoller` runs a pass against the database after `-f queueboxMigrate`', async () => {
    const database = { QUEUEBOX_DATABASE_URL: testDatabaseUrl(), QUEUEBOX_DATABASE__SCHEMA: schema };
    const migrate = await osls(['invoke', 'local', '-f', 'queueboxMigrate', '--stage', 'test'], database);
    assert.equal(migrate.code, 0, explain(migrate));
    assert.deepEqual((lastResult(migrate.stdout) as { applied: number[] }).applied.slice(0, 2), [1, 2]);
    const poller = await osls(['invoke', 'local', '-f', 'queueboxOutboxPoller', '--stage', 'test', '--data', '{"source":"aws.events","detail-type":"Scheduled Event","detail":{}}'], database);
    assert.equal(poller.code, 0, explain(poller));
    const summary = lastResult(poller.stdout);
    assert.equal(summary.claimed, 0, explain(poller));
    assert.ok('stoppedBecause' in summary && 'reclaimRan' in summary, JSON.stringify(summary));
  });

  it('reports a configuration error as errorType ConfigError from the minified bundle', async () => {
    const bad = await osls(['invoke', 'local', '-f', 'queueboxReclaim', '--stage', 'test'], { QUEUEBOX_DATABASE_URL: testDatabaseUrl(), QUEUEBOX_OUTBOX__BATCH_SIZE: '-1' });
    assert.notEqual(bad.code, 0, explain(bad));
    const error = lastResult(bad.stdout) as { errorType: string; errorMessage: string };
    assert.equal(error.errorType, 'ConfigError', explain(bad));
    assert.match(error.errorMessage, /outbox\.batchSize/);
  });

  it('refuses to package a stage with no database location, naming the keys to set', async () => {
    const refused = await osls(['package', '--stage', 'dev', '--package', join(work, 'dev-package')]);
    assert.notEqual(refused.code, 0, explain(refused));
    assert.match(refused.stdout + refused.stderr, /stage dev has no database location: set custom\.queuebox\.databaseSecretArn .* or custom\.queuebox\.databaseUrlParameter .*custom\.queuebox\.allowMissingDatabase: true/s);
  });

  // Last: packaging with other configurations removes .serverless/, which the tests above read.
  it('ships each QueueBox function only its own bundle when the service\'s patterns also start with \'!**\'', async () => {
    // osls merges service and function patterns through a Set: a function-level '!**' equal to the
    // service's is dropped, and the service's includes would then come after it.
    mkdirSync(join(service, 'src'), { recursive: true });
    writeFileSync(join(service, 'src', 'tool.py'), 'X = 1\n');
    for (const [name, patterns] of [
      ['src', "['!**', 'src/**']"],
      ['modules', "['!**', 'src/**', 'node_modules/**']"],
    ] as const) {
      const config = `serverless.${name}.yml`;
      writeFileSync(join(service, config), SERVICE_YML.replace("patterns: ['!node_modules/**']", `patterns: ${patterns}`));
      const out = join(work, `${name}-package`);
      const result = await osls(['package', '--stage', 'test', '--config', config, '--package', out]);
      assert.equal(result.code, 0, explain(result));
      for (const fn of FUNCTIONS) {
        const shipped = zipEntries(join(out, `${functionKey(fn.name)}.zip`));
        assert.deepEqual(shipped.filter((f) => !f.startsWith(`.queuebox/${fn.name}/`)), ['.queuebox/queuebox.yml'], `${name}: ${fn.name} ships none of the service's files`);
        assert.ok(shipped.includes(`.queuebox/${fn.name}/index.js`), `${name}: ${fn.name} ships its bundle`);
      }
      assert.ok(zipEntries(join(out, 'shop.zip')).includes('src/tool.py'), `${name}: the service's own package keeps its includes`);
    }
  });
});
