/**
 * CloudWatch refuses a dashboard with a metric widget that has no metrics (and the stack with it).
 * Panels whose series come from the config (publish latency per destination type, answers per
 * destination) are left out of a config that has none — an inbox of pull sources only, or no
 * outbox destinations — and the remaining widgets close up, two to a row.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig } from '../../lib/config/load-config.ts';
import { dashboardBodyText, dashboardResource } from '../../lib/serverless/dashboard.ts';

type Widget = { type: string; x: number; y: number; width: number; height: number; properties: { title: string; metrics?: unknown[]; query?: string } };

const database = { url: 'postgres://db/app' };
const CONFIGS: Record<string, Record<string, unknown>> = {
  'pull-only inbox': { database, inbox: { sources: { partner: { type: 'sqs', queueName: 'partner-events', consumption: 'pull' } } } },
  'nothing configured': { database },
  'push inbox, no destinations': { database, inbox: { sources: { hooks: { type: 'http', path: '/hooks', auth: { type: 'none' } } } } },
  'one destination': {
    database,
    destinations: { main: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/000000000000/main' } },
    outbox: { routes: [{ topicPattern: '**', destination: 'main' }] },
  },
  'deploy fixture': {},
};

function widgetsOf(name: string): Widget[] {
  const config = name === 'deploy fixture' ? loadConfig({ path: 'test/deploy/fixtures/queuebox.yml', env: {} }) : loadConfig({ input: CONFIGS[name], env: {} });
  // The resource is what is packaged: its body is the text with placeholders joined.
  assert.ok(dashboardResource(config).QueueBoxDashboard);
  return (JSON.parse(dashboardBodyText(config)) as { widgets: Widget[] }).widgets;
}

describe('packaged dashboards', () => {
  for (const name of Object.keys(CONFIGS)) {
    it(`${name}: every metric widget has metrics, and the widgets tile two to a row without holes`, () => {
      const widgets = widgetsOf(name);
      assert.deepEqual(
        widgets.filter((w) => w.type === 'metric' && (w.properties.metrics ?? []).length === 0).map((w) => w.properties.title),
        [],
      );
      widgets.forEach((w, i) => assert.deepEqual([w.x, w.y, w.width, w.height], [(i % 2) * 12, Math.floor(i / 2) * 6, 12, 6], w.properties.title));
      for (const w of widgets.filter((w) => w.type === 'log')) assert.ok(w.properties.query, w.properties.title);
    });
  }

  it('leaves out the destination panels only when there is no destination', () => {
    const titles = (name: string) => widgetsOf(name).map((w) => w.properties.title);
    const perDestination = ['Publish latency by destination type (s, slowest call per pass)', 'Destination answers by destination and outcome'];
    for (const title of perDestination) {
      assert.ok(!titles('pull-only inbox').includes(title), title);
      assert.ok(titles('one destination').includes(title), title);
    }
    // Panels with fixed series stay: the no-route dead rows, the inbox flow, the functions.
    assert.deepEqual(
      titles('one destination').filter((t) => !perDestination.includes(t)),
      titles('pull-only inbox'),
    );
  });
});
