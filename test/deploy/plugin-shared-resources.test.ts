/**
 * `osls package` of a team's own service (the plugin loaded from source, as this repository's
 * `serverless.yml` does) in the shapes where osls's compilers decide what the plugin sees:
 * - no VPC anywhere: osls's function compiler sets `provider.vpc` to `{}` before the plugin adds
 *   its part, yet no QueueBox role gets `AWSLambdaVPCAccessExecutionRole`; with `provider.vpc`,
 *   every one does;
 * - an existing HTTP API (`provider.httpApi.id`): no stage in the template, so the inbox route
 *   gets no throttling or access log, and packaging says so;
 * - the service's own function triggered by an `sqs` source's queue: packaging says so.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { FUNCTIONS, functionLogicalId } from '../../lib/serverless/functions.ts';
import { roleLogicalId } from '../../lib/serverless/roles.ts';
import { explain, run, type Run } from '../helpers/packed-package.ts';
import { OSLS, QUIET_OSLS_ENV } from '../helpers/repo-service.ts';

type Template = { Parameters: Record<string, { Default?: string }>; Resources: Record<string, { Type: string; Properties: Record<string, unknown> }> };

const QUEUEBOX_YML = `destinations:
  events: { type: eventbridge, eventBusName: app-bus, source: com.example.shop }
outbox:
  routes:
    - { topicPattern: '**', destination: events }
inbox:
  sources:
    stripe: { type: http, path: /stripe, auth: { type: stripe, secretEnv: STRIPE_WEBHOOK_SECRET } }
    partner: { type: sqs, queueName: partner-events }
`;

const serviceYml = (provider: string, helloEvent: string) => `service: shop
frameworkVersion: '>=3'
plugins: [./infra/serverless-plugin.cjs]
provider:
  name: aws
  runtime: python3.12
  region: eu-west-1
${provider}
package:
  patterns: ['!node_modules/**', '!infra/**']
functions:
  hello:
    handler: handler.hello
    events:
      - ${helloEvent}
custom:
  queuebox:
    config: queuebox.yml
    databaseUrlParameter: /shop/dev/database-url
`;

/** A scratch service with this `serverless.yml`, packaged for stage dev. */
async function packaged(dirs: string[], yml: string): Promise<{ run: Run; template: Template }> {
  const dir = mkdtempSync(join(tmpdir(), 'qb-shared-'));
  dirs.push(dir);
  for (const link of ['infra', 'node_modules']) symlinkSync(resolve(link), join(dir, link));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'shop', private: true }));
  writeFileSync(join(dir, 'handler.py'), 'def hello(event, context):\n    return {"statusCode": 200}\n');
  writeFileSync(join(dir, 'queuebox.yml'), QUEUEBOX_YML);
  writeFileSync(join(dir, 'serverless.yml'), yml);
  const result = await run(process.execPath, [OSLS, 'package', '--stage', 'dev'], { cwd: dir, env: { PATH: process.env.PATH, HOME: process.env.HOME, ...QUIET_OSLS_ENV }, timeoutMs: 240_000 });
  assert.equal(result.code, 0, explain(result));
  return { run: result, template: JSON.parse(readFileSync(join(dir, '.serverless/cloudformation-template-update-stack.json'), 'utf8')) as Template };
}

/** The managed policies of a QueueBox role with the stack's parameters at their defaults. */
function managedPolicies(template: Template, role: string): unknown {
  const [condition, inVpc, outside] = (template.Resources[role]!.Properties.ManagedPolicyArns as { 'Fn::If': [string, unknown, unknown] })['Fn::If'];
  assert.equal(condition, 'QueueBoxVpcAccess');
  return template.Parameters.QueueBoxVpcAccessParam!.Default === 'true' ? inVpc : outside;
}

describe('osls package of a service sharing an HTTP API and a queue, with and without a VPC', { timeout: 600_000 }, () => {
  const dirs: string[] = [];
  let shared: { run: Run; template: Template };
  let inVpc: { run: Run; template: Template };

  before(async () => {
    shared = await packaged(dirs, serviceYml('  httpApi: { id: abc123defg }', 'sqs: arn:aws:sqs:eu-west-1:123456789012:partner-events'));
    inVpc = await packaged(dirs, serviceYml('  vpc: { securityGroupIds: [sg-1], subnetIds: [subnet-1, subnet-2] }', 'httpApi: { method: GET, path: /hello }'));
  }, { timeout: 560_000 });
  after(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('attaches AWSLambdaVPCAccessExecutionRole to no QueueBox role without a VPC, and to each with provider.vpc', () => {
    for (const fn of FUNCTIONS) {
      assert.equal(shared.template.Resources[functionLogicalId(fn.name)]!.Properties.VpcConfig, undefined, fn.name);
      assert.deepEqual(managedPolicies(shared.template, roleLogicalId(fn.name)), { Ref: 'AWS::NoValue' }, fn.name);
      assert.deepEqual(inVpc.template.Resources[functionLogicalId(fn.name)]!.Properties.VpcConfig, { SecurityGroupIds: ['sg-1'], SubnetIds: ['subnet-1', 'subnet-2'] }, fn.name);
      assert.match(JSON.stringify(managedPolicies(inVpc.template, roleLogicalId(fn.name))), /AWSLambdaVPCAccessExecutionRole/, fn.name);
    }
  });

  it('warns that the inbox route on an existing HTTP API gets no throttling and no access log', () => {
    const output = shared.run.stdout + shared.run.stderr;
    assert.ok(shared.template.Resources.HttpApiRoutePostInboxStripe, 'the route is on the existing API');
    assert.equal(Object.values(shared.template.Resources).filter((r) => r.Type === 'AWS::ApiGatewayV2::Stage').length, 0);
    assert.match(output, /QueueBox: the inbox routes \(POST \/inbox\/stripe\) are on an existing HTTP API \(provider\.httpApi\.id\) whose stage this stack does not create: they get no throttling \(custom\.queuebox\.httpApi\) and no access log/);
    assert.doesNotMatch(inVpc.run.stdout + inVpc.run.stderr, /existing HTTP API/, 'the service\'s own API has its stage');
  });

  it('warns that the service\'s function hello consumes the partner source\'s queue', () => {
    assert.match(shared.run.stdout + shared.run.stderr, /QueueBox: inbox source partner's queue partner-events also triggers your function hello: Lambda splits the queue's messages/);
    assert.doesNotMatch(inVpc.run.stdout + inVpc.run.stderr, /also triggers your function/);
  });
});
