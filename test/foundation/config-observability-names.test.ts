/**
 * `observability.namespace` and `observability.serviceName` reach CloudWatch (the namespace of every
 * metric, the dashboard and the alarms; the `service` dimension), which drops or refuses what its
 * API does not accept. The configuration refuses those values at load, naming the key, instead of
 * metrics that never appear and alarms that watch nothing.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig } from '../../lib/config/load-config.ts';
import { refusal } from '../helpers/config-refusal.ts';

const base = { database: { url: 'postgres://db/app' } };

const withObservability = (observability: Record<string, unknown>) => loadConfig({ input: { ...base, observability }, env: {} });

describe('observability names CloudWatch accepts', () => {
  it('refuses a namespace CloudWatch refuses, naming the key and the rule', () => {
    const refused: Array<[string, RegExp]> = [
      [':QueueBox', /must not start with ":"/],
      ['AWS/QueueBox', /must not start with "AWS\/": reserved for AWS services/],
      ['AWS/', /must not start with "AWS\/"/],
      ['Queue\nBox', /printable ASCII/],
      ['Queue\tBox', /printable ASCII/],
      ['Queue\u007fBox', /printable ASCII/],
      ['Queue\u0000Box', /printable ASCII/],
      ['Café', /printable ASCII/],
      ['   ', /at least one character other than a space/],
      ['', /./],
      ['x'.repeat(256), /./],
    ];
    for (const [namespace, rule] of refused) {
      const error = refusal(() => withObservability({ namespace }));
      assert.equal(error.key, 'observability.namespace', JSON.stringify(namespace));
      assert.match(error.issues[0]!.message, rule, JSON.stringify(namespace));
    }
  });

  it('accepts the namespaces CloudWatch accepts: printable ASCII, a colon or AWS after the first character', () => {
    for (const namespace of ['QueueBox', 'Shop/Orders', 'shop:orders', 'My App (prod)', 'AWSome', 'Team/AWS/QueueBox', 'x'.repeat(255)]) {
      assert.equal(withObservability({ namespace }).observability.namespace, namespace);
    }
  });

  it('refuses a blank serviceName or one CloudWatch refuses as a dimension value, naming the key', () => {
    for (const serviceName of ['  ', '\t', 'orders\nservice', 'café', '']) {
      const error = refusal(() => withObservability({ serviceName }));
      assert.equal(error.key, 'observability.serviceName', JSON.stringify(serviceName));
    }
    assert.match(refusal(() => withObservability({ serviceName: '  ' })).issues[0]!.message, /at least one character other than a space/);
    assert.equal(withObservability({ serviceName: 'orders #2' }).observability.serviceName, 'orders #2');
  });

  it('refuses in either name a character that would break the dashboard\'s metric searches and log queries, which quote it', () => {
    for (const value of ['orders "eu"', "Team's", 'a,b', '{ns}', 'back\\slash']) {
      for (const key of ['namespace', 'serviceName'] as const) {
        const error = refusal(() => withObservability({ [key]: value }));
        assert.match(error.message, new RegExp(`observability\\.${key}: must not contain`), `${key} = ${value}`);
      }
    }
  });

  it('refuses an override naming its variable', () => {
    const error = refusal(() => loadConfig({ input: base, env: { QUEUEBOX_OBSERVABILITY__NAMESPACE: 'AWS/Lambda' } }));
    assert.match(error.message, /observability\.namespace \(from QUEUEBOX_OBSERVABILITY__NAMESPACE\): must not start with "AWS\/"/);
  });
});
