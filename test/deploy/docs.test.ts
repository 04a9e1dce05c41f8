import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { loadConfig } from '../../lib/config/load-config.ts';
import { METRIC_NAMES, METRICS, type MetricKey } from '../../lib/observability/metric-names.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { alarmResources } from '../../infra/alarms.ts';
import { CONFIG_MEANINGS } from '../../infra/config-meanings.ts';
import { dashboardBodyText } from '../../infra/dashboard.ts';
import { configKeys, renderConfigurationDoc, renderMetricsDoc } from '../../infra/reference-docs.ts';

const config = loadConfig({ path: 'test/deploy/fixtures/queuebox.yml', env: {} });

describe('reference docs and monitoring agree with the code', () => {
  it('docs/configuration.md is the output of the generator (every schema key, type and default)', () => {
    assert.equal(readFileSync('docs/configuration.md', 'utf8'), renderConfigurationDoc(), 'run `npm run docs:reference`');
  });

  it('every documented meaning names a key the schema still has', () => {
    const keys = new Set(configKeys().map((r) => r.key));
    assert.deepEqual(Object.keys(CONFIG_MEANINGS).filter((k) => !keys.has(k)), []);
  });

  it('docs/metrics.md lists exactly the metrics of METRICS', () => {
    const text = readFileSync('docs/metrics.md', 'utf8');
    assert.equal(text, renderMetricsDoc(), 'run `npm run docs:reference`');
    const listed = [...text.matchAll(/^\| `(queuebox_[a-z_]+)` \|/gm)].map((m) => m[1]);
    assert.deepEqual([...listed].sort(), [...METRIC_NAMES].sort());
  });

  it('every metric the dashboard or an alarm names is one the code emits', () => {
    const named = [...dashboardBodyText(config).matchAll(/queuebox_[a-z_]+/g)].map((m) => m[0]);
    for (const alarm of Object.values(alarmResources(config)) as Array<{ Properties: { Namespace: string; MetricName: string } }>) {
      if (alarm.Properties.Namespace === config.observability.namespace) named.push(alarm.Properties.MetricName);
    }
    assert.ok(named.length > 10);
    for (const name of named) assert.ok(METRIC_NAMES.includes(name as never), `${name} is in METRICS`);
  });

  it('each alarm queries the exact namespace and dimension set of the EMF line QueueBoxMetrics writes', () => {
    for (const alarm of Object.values(alarmResources(config)) as Array<{ Properties: { Namespace: string; MetricName: string; Dimensions: Array<{ Name: string; Value: string }> } }>) {
      const p = alarm.Properties;
      if (p.Namespace === 'AWS/Lambda') continue;
      const key = (Object.keys(METRICS) as MetricKey[]).find((k) => METRICS[k].name === p.MetricName)!;
      const own = Object.fromEntries(p.Dimensions.filter((d) => d.Name !== 'service').map((d) => [d.Name, d.Value]));
      const lines: string[] = [];
      const metrics = new QueueBoxMetrics({ namespace: config.observability.namespace, serviceName: config.observability.serviceName, write: (l) => lines.push(l) });
      metrics.count(key, 1, own);
      metrics.flush();
      const emf = JSON.parse(lines[0]!) as Record<string, unknown> & { _aws: { CloudWatchMetrics: Array<{ Namespace: string; Dimensions: string[][] }> } };
      const directive = emf._aws.CloudWatchMetrics[0]!;
      assert.equal(directive.Namespace, p.Namespace);
      assert.deepEqual([...directive.Dimensions[0]!].sort(), p.Dimensions.map((d) => d.Name).sort(), `${p.MetricName} dimension set`);
      for (const d of p.Dimensions) assert.equal(emf[d.Name], d.Value, `${p.MetricName} ${d.Name} value`);
    }
  });
});
