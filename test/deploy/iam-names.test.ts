/**
 * Names that enter IAM resource ARNs are checked first: IAM reads `*` and `?` as wildcards, so a
 * destination named with one would grant far more than the one queue or bus meant.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseConfig } from '../../lib/config/load-config.ts';
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
