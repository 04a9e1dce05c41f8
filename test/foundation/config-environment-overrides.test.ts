/**
 * `QUEUEBOX_*` environment overrides (lib/config/load-config.ts, docs/configuration.md): the value
 * is one value typed by the key it sets, never a YAML document; a name chosen in the file (a
 * source, a destination) is matched case-insensitively with its underscores; and an error at a
 * key an override set names the variable.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig } from '../../lib/config/load-config.ts';
import { refusal } from '../helpers/config-refusal.ts';

const base = { database: { schema: 'overrides_test' } };

describe('environment override values', () => {
  it('a string key takes the text verbatim: " #", digits, ": " and a URL with a fragment are kept whole', () => {
    const config = loadConfig({
      input: { ...base, database: { ...base.database, url: 'postgres://file/db' } },
      env: {
        QUEUEBOX_OBSERVABILITY__SERVICE_NAME: 'orders #2',
        QUEUEBOX_OBSERVABILITY__NAMESPACE: '2024',
        QUEUEBOX_INBOX__TOPIC_TEMPLATE: 'in: {{ source }}',
        QUEUEBOX_DATABASE__URL: 'postgres://u:p@db/app #primary',
      },
    });
    assert.equal(config.observability.serviceName, 'orders #2');
    assert.equal(config.observability.namespace, '2024');
    assert.equal(config.inbox.topicTemplate, 'in: {{ source }}');
    assert.equal(config.database.url, 'postgres://u:p@db/app #primary');
  });

  it('a number key takes a decimal number and a boolean key true or false; other text is refused naming the key and the variable', () => {
    const config = loadConfig({ input: base, env: { QUEUEBOX_OUTBOX__BATCH_SIZE: ' 50 ', QUEUEBOX_PULL__RETRY__JITTER: '0.5', QUEUEBOX_RETENTION__ENABLED: 'TRUE', QUEUEBOX_OBSERVABILITY__TRACING: 'false' } });
    assert.deepEqual([config.outbox.batchSize, config.pull.retry.jitter, config.retention.enabled, config.observability.tracing], [50, 0.5, true, false]);
    for (const [variable, value, key] of [
      ['QUEUEBOX_OUTBOX__BATCH_SIZE', '50 # fifty', 'outbox.batchSize'],
      ['QUEUEBOX_OUTBOX__BATCH_SIZE', '0x10', 'outbox.batchSize'],
      ['QUEUEBOX_RETENTION__ENABLED', 'yes', 'retention.enabled'],
    ] as const) {
      const error = refusal(() => loadConfig({ input: base, env: { [variable]: value } }));
      assert.equal(error.key, key);
      assert.equal(error.issues[0]!.variable, variable);
      assert.match(error.message, new RegExp(`${key.replace('.', '\\.')} \\(from ${variable}\\): `));
    }
  });

  it('a mapping or a list cannot be set from the environment', () => {
    const list = refusal(() => loadConfig({ input: base, env: { QUEUEBOX_OUTBOX__ROUTES: '[{topicPattern: "**", destination: orders}]' } }));
    assert.equal(list.key, 'outbox.routes');
    assert.match(list.message, /outbox\.routes \(from QUEUEBOX_OUTBOX__ROUTES\): is a list: an environment variable sets one value/);
    const mapping = refusal(() => loadConfig({ input: base, env: { QUEUEBOX_PULL__RETRY: 'maxAttempts: 3' } }));
    assert.match(mapping.message, /pull\.retry \(from QUEUEBOX_PULL__RETRY\): is a mapping/);
  });
});

describe('environment override names', () => {
  it('an error at a key an override set names the variable', () => {
    const error = refusal(() => loadConfig({ input: base, env: { QUEUEBOX_OUTBOX__BATCH_SIZ: '50' } }));
    assert.equal(error.key, 'outbox.batchSiz');
    assert.match(error.message, /outbox\.batchSiz \(from QUEUEBOX_OUTBOX__BATCH_SIZ\): unknown key/);
    const section = refusal(() => loadConfig({ input: base, env: { QUEUEBOX_OUTBOKS__BATCH_SIZE: '50' } }));
    assert.match(section.message, /outboks \(from QUEUEBOX_OUTBOKS__BATCH_SIZE\): unknown key/);
    // A key the file set keeps its plain message.
    const fromFile = refusal(() => loadConfig({ input: { ...base, outbox: { batchSiz: 50 } } as never, env: {} }));
    assert.match(fromFile.message, /- outbox\.batchSiz: unknown key/);
  });

  it('reaches a source or destination whose name has underscores (or other case, or -), as named in the file', () => {
    const config = loadConfig({
      input: {
        ...base,
        destinations: { Partner_Orders: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/partner' } },
        inbox: { sources: { partner_orders: { type: 'sqs' }, 'billing-events': { type: 'sqs' } } },
      },
      env: {
        QUEUEBOX_INBOX__SOURCES__PARTNER_ORDERS__CONSUMPTION: 'pull',
        QUEUEBOX_INBOX__SOURCES__BILLING_EVENTS__QUEUE_NAME: 'billing-queue',
        QUEUEBOX_DESTINATIONS__PARTNER_ORDERS__REGION: 'eu-west-1',
      },
    });
    assert.equal(config.inbox.sources.partner_orders?.consumption, 'pull');
    assert.equal(config.inbox.sources['billing-events']?.queueName, 'billing-queue');
    assert.equal(config.destinations.Partner_Orders?.region, 'eu-west-1');
    assert.deepEqual(Object.keys(config.inbox.sources).sort(), ['billing-events', 'partner_orders']);
  });

  it('a source that is not in the file is refused naming the variable and the names the file has (an override never makes an entry)', () => {
    const error = refusal(() => loadConfig({ input: base, env: { QUEUEBOX_INBOX__SOURCES__PARTNER_ORDERS__CONSUMPTION: 'pull' } }));
    assert.equal(error.key, 'inbox.sources.partner_orders');
    assert.match(error.message, /inbox\.sources\.partner_orders \(from QUEUEBOX_INBOX__SOURCES__PARTNER_ORDERS__CONSUMPTION\): no entry "partner_orders" in the file's inbox\.sources/);
  });

  it('a mistyped source or destination name is refused, not made into a new entry from a few variables', () => {
    const input = { destinations: { orders: { type: 'sqs' as const, queueUrl: 'https://sqs.eu-west-1.amazonaws.com/000000000000/orders' } }, inbox: { sources: { partner: { type: 'sqs' as const } } } };
    const source = refusal(() => loadConfig({ input, env: { QUEUEBOX_INBOX__SOURCES__PARTNR__TYPE: 'http', QUEUEBOX_INBOX__SOURCES__PARTNR__PATH: '/open', QUEUEBOX_INBOX__SOURCES__PARTNR__AUTH__TYPE: 'none' } }));
    assert.equal(source.key, 'inbox.sources.partnr');
    assert.match(source.message, /it has partner/);
    const destination = refusal(() => loadConfig({ input, env: { QUEUEBOX_DESTINATIONS__ORDRS__REGION: 'eu-west-1' } }));
    assert.equal(destination.key, 'destinations.ordrs');
    assert.match(destination.message, /it has orders/);
    // The names the file has still take their keys from the environment.
    assert.equal(loadConfig({ input, env: { QUEUEBOX_DESTINATIONS__ORDERS__REGION: 'eu-west-1' } }).destinations.orders?.region, 'eu-west-1');
  });
});
