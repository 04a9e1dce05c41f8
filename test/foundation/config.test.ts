import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { loadConfig } from '../../lib/config/load-config.ts';
import { DEFAULT_ROWS_PER_KEY, outboxRowsPerKey } from '../../lib/config/schema.ts';
import { ConfigError } from '../../lib/errors.ts';

function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof ConfigError, `expected ConfigError, got ${String(error)}`);
    return error;
  }
  assert.fail('expected a ConfigError');
}

function yamlFile(text: string): string {
  const path = join(mkdtempSync(join(tmpdir(), 'qb-config-')), 'queuebox.yml');
  writeFileSync(path, text);
  return path;
}

describe('configuration', () => {
  it('applies every default of the spec when nothing is configured', () => {
    const config = loadConfig({ env: {} });
    assert.deepEqual(
      { ...config.outbox, routes: undefined },
      { batchSize: 100, maxBatchSize: 1000, concurrency: 8, pollIntervalMs: 100, maxPollIntervalMs: 1000, retryBaseDelayMs: 1000, maxAttempts: 5, claimTimeoutMs: 300000, shutdownTimeoutMs: 30000, routes: undefined, scaleOut: { maxConcurrentPasses: 1 } },
    );
    assert.equal(config.inbox.maxBodyBytes, 1048576);
    assert.equal(config.inbox.relay.claimTimeoutMs, 300000);
    assert.deepEqual([config.inbox.relay.pollIntervalMs, config.inbox.relay.maxPollIntervalMs], [100, 1000]);
    assert.deepEqual(config.pull, { batchSize: 10, leaseMs: 30000, concurrency: 1, pollMs: 1000, retry: { maxAttempts: 5, baseDelayMs: 1000, maxDelayMs: 300000, jitter: 0.2 } });
    assert.equal(config.retention.enabled, false);
    assert.equal(config.observability.namespace, 'QueueBox');
    assert.deepEqual(config.tables, { outbox: 'outbox', inbox: 'inbox', maintenance: 'queuebox_maintenance' });
  });

  it('reads the YAML file and lets QUEUEBOX_* variables override it, typed', () => {
    const path = yamlFile(`
database:
  url: postgres://db/app
outbox:
  batchSize: 50
destinations:
  orders:
    type: sqs
    queueUrl: https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo
  `);
    const config = loadConfig({ path, env: { QUEUEBOX_OUTBOX__BATCH_SIZE: '25', QUEUEBOX_RETENTION__ENABLED: 'true', QUEUEBOX_DESTINATIONS__ORDERS__REGION: 'eu-west-1' } });
    assert.equal(config.outbox.batchSize, 25);
    assert.equal(config.retention.enabled, true);
    assert.equal(config.database.url, 'postgres://db/app');
    assert.equal(config.destinations.orders?.region, 'eu-west-1');
  });

  it('takes the database URL from QUEUEBOX_DATABASE_URL or DATABASE_URL when the file has none', () => {
    assert.equal(loadConfig({ env: { DATABASE_URL: 'postgres://a/b' } }).database.url, 'postgres://a/b');
    assert.equal(loadConfig({ env: { QUEUEBOX_DATABASE_URL: 'postgres://c/d', DATABASE_URL: 'postgres://a/b' } }).database.url, 'postgres://c/d');
    // An empty QUEUEBOX_DATABASE_URL is unset: DATABASE_URL still counts.
    assert.equal(loadConfig({ env: { QUEUEBOX_DATABASE_URL: '', DATABASE_URL: 'postgres://a/b' } }).database.url, 'postgres://a/b');
    assert.equal(loadConfig({ env: { QUEUEBOX_DATABASE_URL: '', DATABASE_URL: '' } }).database.url, undefined);
  });

  it('takes up to 10 rows of a key per claim on PostgreSQL and one on SQL Server unless told otherwise', () => {
    assert.equal(DEFAULT_ROWS_PER_KEY, 10, 'the default chosen from the bench');
    assert.equal(outboxRowsPerKey(loadConfig({ env: {} })), 10);
    assert.equal(outboxRowsPerKey(loadConfig({ path: yamlFile('outbox:\n  rowsPerKey: 1\n'), env: {} })), 1);
    assert.equal(outboxRowsPerKey(loadConfig({ path: yamlFile('outbox:\n  rowsPerKey: 10\n'), env: {} })), 10);
    assert.equal(outboxRowsPerKey(loadConfig({ path: yamlFile('database:\n  type: sqlserver\n'), env: {} })), 1);
    assert.equal(outboxRowsPerKey(loadConfig({ path: yamlFile('database:\n  type: sqlserver\noutbox:\n  rowsPerKey: 1\n'), env: {} })), 1);
  });

  const bad: Array<[string, string, Record<string, string>, string, RegExp]> = [
    ['an unknown key', 'outbox:\n  batchSzie: 5\n', {}, 'outbox.batchSzie', /unknown key/],
    ['a wrong type', 'outbox:\n  batchSize: lots\n', {}, 'outbox.batchSize', /number/],
    ['a value out of range', 'outbox:\n  concurrency: 0\n', {}, 'outbox.concurrency', />/],
    ['a hostile table name', 'tables:\n  outbox: \'outbox"; DROP TABLE users; --\'\n', {}, 'tables.outbox', /identifier/],
    ['a hostile schema name', 'database:\n  schema: "public.x"\n', {}, 'database.schema', /identifier/],
    ['a route to a missing destination', 'outbox:\n  routes:\n    - topicPattern: "orders.*"\n      destination: nowhere\n', {}, 'outbox.routes.0.destination', /nowhere/],
    ['an unknown environment override', '', { QUEUEBOX_OUTBOX__BATCH_SIZZE: '3' }, 'outbox.batchSizze', /unknown key/],
    ['an override of a wrong type', '', { QUEUEBOX_OUTBOX__CLAIM_TIMEOUT_MS: 'soon' }, 'outbox.claimTimeoutMs', /number/],
    ['an http source without a path', 'inbox:\n  sources:\n    stripe:\n      type: http\n', {}, 'inbox.sources.stripe.path', /required/],
    ['more than one row per key on SQL Server', 'database:\n  type: sqlserver\noutbox:\n  rowsPerKey: 4\n', {}, 'outbox.rowsPerKey', /not supported on SQL Server yet/],
    ['rows per key out of range', 'outbox:\n  rowsPerKey: 0\n', {}, 'outbox.rowsPerKey', />/],
    ['a claim ceiling below the batch size', 'outbox:\n  batchSize: 200\n  maxBatchSize: 150\n', {}, 'outbox.maxBatchSize', /below outbox.batchSize \(200\)/],
    ['a claim ceiling past 1,000', '', { QUEUEBOX_OUTBOX__MAX_BATCH_SIZE: '5000' }, 'outbox.maxBatchSize', /1000/],
    ['an EventBridge source in the aws. namespace', 'destinations:\n  bus:\n    type: eventbridge\n    eventBusName: orders\n    source: aws.orders\n', {}, 'destinations.bus.source', /must not start with "aws\."/],
    ...['orders.fifo/', 'orders?', 'orders#top', 'orders?Action=x'].map(
      (end): [string, string, Record<string, string>, string, RegExp] => [
        `an SQS queue URL ending in ${end}`,
        `destinations:\n  orders:\n    type: sqs\n    queueUrl: https://sqs.eu-west-1.amazonaws.com/123456789012/${end}\n`,
        {},
        'destinations.orders.queueUrl',
        /must end in the queue name, with no trailing slash, query or fragment/,
      ],
    ),
    ['an SQS queue URL without a queue', 'destinations:\n  orders:\n    type: sqs\n    queueUrl: https://sqs.eu-west-1.amazonaws.com\n', {}, 'destinations.orders.queueUrl', /must end in the queue name/],
    ['an SQS queue URL without an account', 'destinations:\n  orders:\n    type: sqs\n    queueUrl: https://sqs.eu-west-1.amazonaws.com/orders\n', {}, 'destinations.orders.queueUrl', /must end in the queue name/],
    ['a poll ceiling below the poll interval', 'outbox:\n  pollIntervalMs: 5000\n', {}, 'outbox.maxPollIntervalMs', /is 1000, below outbox\.pollIntervalMs \(5000\).*set it to 5000 or more/],
    ['a relay poll ceiling below its poll interval', 'inbox:\n  relay:\n    pollIntervalMs: 300\n    maxPollIntervalMs: 200\n', {}, 'inbox.relay.maxPollIntervalMs', /below inbox\.relay\.pollIntervalMs \(300\)/],
    ['an EventBridge request limit past 1 MiB', 'destinations:\n  bus:\n    type: eventbridge\n    eventBusName: b\n    source: shop\n    maxRequestBytes: 2000000\n', {}, 'destinations.bus.maxRequestBytes', /from 16384 to 1048576/],
    ['an unknown auth type', 'inbox:\n  sources:\n    stripe:\n      type: http\n      path: /stripe\n      auth:\n        type: magic\n', {}, 'inbox.sources.stripe.auth.type', /./],
  ];
  for (const [what, yaml, env, key, message] of bad) {
    it(`stops on ${what} with a message naming ${key}`, () => {
      const error = configError(() => loadConfig({ path: yamlFile(yaml), env }));
      assert.equal(error.key, key, error.message);
      assert.match(error.issues[0]!.message, message);
      assert.match(error.message, new RegExp(key.replaceAll('.', '\\.')));
    });
  }

  it('takes an EventBridge source that contains aws elsewhere than as the aws. prefix', () => {
    for (const source of ['shop.aws.orders', 'awsome.orders', 'aws']) {
      const config = loadConfig({ path: yamlFile(`destinations:\n  bus:\n    type: eventbridge\n    eventBusName: orders\n    source: ${source}\n`), env: {} });
      assert.equal(config.destinations.bus?.type === 'eventbridge' && config.destinations.bus.source, source);
    }
  });

  it('stops on a file that is not YAML, naming the file', () => {
    const path = yamlFile('outbox: [unclosed');
    const error = configError(() => loadConfig({ path, env: {} }));
    assert.match(error.message, /not valid YAML/);
  });

  it('says to write true or false for a YAML 1.1 boolean (yes, on, off), which YAML 1.2 reads as text', () => {
    for (const word of ['yes', 'On', 'off', 'n']) {
      const error = configError(() => loadConfig({ path: yamlFile(`retention:\n  enabled: ${word}\n`), env: {} }));
      assert.match(error.message, new RegExp(`retention\\.enabled: .*expected boolean.*\\("${word}": write true or false`), word);
    }
    const other = configError(() => loadConfig({ path: yamlFile('retention:\n  enabled: maybe\n'), env: {} }));
    assert.doesNotMatch(other.message, /write true or false/, 'only the words YAML 1.1 read as booleans');
  });
});
