/**
 * Names that enter IAM resource ARNs are checked first: IAM reads `*` and `?` as wildcards, so a
 * destination named with one would grant far more than the one queue or bus meant.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig, parseConfig } from '../../lib/config/load-config.ts';
import { scaleOutCap } from '../../lib/serverless/scale-out-settings.ts';
import { buildStackFragment } from '../../lib/serverless/stack.ts';

describe('IAM resources from configured names', () => {
  const build = (destinations: Record<string, unknown>, sources: Record<string, unknown> = {}) =>
    buildStackFragment(parseConfig({ destinations, outbox: { routes: [{ topicPattern: '**', destination: Object.keys(destinations)[0]! }] }, inbox: { sources } } as never), { service: 'app', stage: 'test' });

  it('refuses a queue URL, bus name or trigger queue with a wildcard character, naming it', () => {
    assert.throws(() => build({ q: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders*' } }), /queue name in queue URL "orders\*"/);
    assert.throws(() => build({ q: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/*/orders' } }), /account id in queue URL/);
    assert.throws(() => build({ b: { type: 'eventbridge', eventBusName: 'bus?', source: 's' } }), /event bus name "bus\?"/);
    assert.throws(() => build({ b: { type: 'eventbridge', eventBusName: 'arn:aws:events:eu-west-1:123456789012:event-bus/*', source: 's' } }), /event bus ARN/);
  });

  it('builds exact ARNs from valid names', () => {
    const fragment = build({ q: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo' } }, { feed: { type: 'sqs', queueName: 'feed-events' } });
    const text = JSON.stringify(fragment.resources.Resources.QueueBoxRoleOutboxPoller);
    assert.match(text, /:123456789012:orders\.fifo"/);
    assert.match(JSON.stringify(fragment.resources.Resources.QueueBoxRoleInboxSqs), /:feed-events"/);
  });
});

describe('IAM and environment of scale-out', () => {
  const fragment = (outbox: number, relay: number) =>
    buildStackFragment(parseConfig({ outbox: { scaleOut: { maxConcurrentPasses: outbox } }, inbox: { relay: { scaleOut: { maxConcurrentPasses: relay } } } } as never), { service: 'app', stage: 'test' });
  const invokeStatements = (resources: Record<string, unknown>, role: string) =>
    ((resources[role] as { Properties: { Policies: Array<{ PolicyDocument: { Statement: Array<{ Action?: string[]; Resource?: unknown[] }> } }> } }).Properties.Policies[0]!.PolicyDocument.Statement).filter((s) => s.Action?.includes('lambda:InvokeFunction'));

  it('lets a function with scale-out on invoke its own function, by an ARN built from its deployed name, and nothing else', () => {
    const { Resources } = fragment(4, 1).resources;
    const [statement, ...others] = invokeStatements(Resources, 'QueueBoxRoleOutboxPoller');
    assert.equal(others.length, 0);
    assert.deepEqual(statement!.Action, ['lambda:InvokeFunction']);
    const arn = (suffix: string) => ({ 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':lambda:', { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, suffix]] });
    // the function itself, and its versions and aliases (a schedule that targets an alias scales out through it)
    assert.deepEqual(statement!.Resource, [arn(':function:app-test-queueboxOutboxPoller'), arn(':function:app-test-queueboxOutboxPoller:*')]);
    for (const role of Object.keys(Resources).filter((id) => id.startsWith('QueueBoxRole') && id !== 'QueueBoxRoleOutboxPoller')) {
      assert.deepEqual(invokeStatements(Resources, role), [], `${role} invokes nothing`);
    }
    assert.match(JSON.stringify(invokeStatements(fragment(1, 2).resources.Resources, 'QueueBoxRoleInboxRelay')), /:function:app-test-queueboxInboxRelay"/);
  });

  it('grants no invoke when a reserved concurrency of 1 or 0 caps scale-out at one pass; 2 leaves room', () => {
    const config = parseConfig({ outbox: { scaleOut: { maxConcurrentPasses: 4 } }, inbox: { relay: { scaleOut: { maxConcurrentPasses: 4 } } } } as never);
    const build = (reservedConcurrency: Record<string, number | undefined>) => buildStackFragment(config, { service: 'app', stage: 'test' }, undefined, reservedConcurrency).resources.Resources;
    for (const reserved of [0, 1]) {
      const resources = build({ outboxPoller: reserved, inboxRelay: reserved });
      assert.deepEqual(invokeStatements(resources, 'QueueBoxRoleOutboxPoller'), [], `outboxPoller at ${reserved}`);
      assert.deepEqual(invokeStatements(resources, 'QueueBoxRoleInboxRelay'), [], `inboxRelay at ${reserved}`);
    }
    const mixed = build({ outboxPoller: 1, inboxRelay: 2 });
    assert.deepEqual(invokeStatements(mixed, 'QueueBoxRoleOutboxPoller'), []);
    assert.equal(invokeStatements(mixed, 'QueueBoxRoleInboxRelay').length, 1);
    assert.equal(invokeStatements(build({}), 'QueueBoxRoleOutboxPoller').length, 1, 'none reserved');
  });

  it('grants no invoke while scale-out is off (the default)', () => {
    const { Resources } = fragment(1, 1).resources;
    assert.ok(!JSON.stringify(Resources).includes('lambda:InvokeFunction'));
  });

  it('caps scale-out at a lower reserved concurrency through the function\'s environment, and says so', () => {
    const config = parseConfig({ outbox: { scaleOut: { maxConcurrentPasses: 4 } }, inbox: { relay: { scaleOut: { maxConcurrentPasses: 3 } } } } as never);
    const capped = scaleOutCap(config, 'outboxPoller', 2);
    assert.deepEqual(capped.environment, { QUEUEBOX_OUTBOX__SCALE_OUT__MAX_CONCURRENT_PASSES: '2' });
    assert.match(capped.warning!, /outbox\.scaleOut\.maxConcurrentPasses is 4 but outboxPoller has a reserved concurrency of 2/);
    assert.deepEqual(scaleOutCap(config, 'inboxRelay', 0).environment, { QUEUEBOX_INBOX__RELAY__SCALE_OUT__MAX_CONCURRENT_PASSES: '1' });
    assert.deepEqual(scaleOutCap(config, 'outboxPoller', 4), { environment: {} }, 'enough reserved concurrency');
    assert.deepEqual(scaleOutCap(config, 'outboxPoller', undefined), { environment: {} }, 'none reserved');
    assert.deepEqual(scaleOutCap(config, 'inboxHttp', 1), { environment: {} }, 'not a scaling function');
    // The variable is the override the configuration loader reads.
    assert.equal(loadConfig({ env: { ...capped.environment } }).outbox.scaleOut.maxConcurrentPasses, 2);
  });
});
