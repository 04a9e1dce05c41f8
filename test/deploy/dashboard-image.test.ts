/**
 * The dashboard picture in the docs is drawn from the deployed dashboard definition: every
 * widget of `dashboardBodyText` appears with its title, and its series are the EMF values of the
 * run, aggregated per round by each metric row's statistic and matched on its exact dimensions.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { dashboardHtml, logTableRows, widgetSeries } from '../../infra/dashboard-html.ts';
import type { SampleRound } from '../../infra/dashboard-sample-run.ts';
import { dashboardBodyText } from '../../lib/serverless/dashboard.ts';
import { loadConfig } from '../../lib/config/load-config.ts';
import { reportRelayFailures, type RelayFailure } from '../../lib/inbox/relay-failure-report.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';

const config = loadConfig({ path: 'test/deploy/fixtures/queuebox.yml', env: {} });

/** A round whose EMF lines are what `record` counts, written by the real metrics buffer. */
function round(record: (metrics: QueueBoxMetrics) => void, lambda: SampleRound['lambda'] = {}): SampleRound {
  const emf: string[] = [];
  const metrics = new QueueBoxMetrics({ namespace: config.observability.namespace, serviceName: config.observability.serviceName, write: (l) => emf.push(l) });
  record(metrics);
  metrics.flush();
  return { emf, lambda };
}

describe('dashboard picture', () => {
  const body = dashboardBodyText(config);
  const widgets = (JSON.parse(body) as { widgets: Array<{ type: 'metric' | 'log'; x: number; y: number; width: number; height: number; properties: { title: string; metrics?: unknown[][]; query?: string } }> }).widgets;
  const rounds = [
    round((m) => {
      m.count('outboxMessages', 5, { status: 'sent' });
      m.count('outboxMessages', 2, { status: 'sent' });
      m.count('inboxRejections', 1, { reason: 'unauthorized' });
      m.gauge('outboxOldestPendingAge', 3);
    }, { outboxPoller: { durationMs: 120, error: false } }),
    round((m) => {
      m.count('outboxMessages', 1, { status: 'dead' });
      m.count('inboxRejections', 2, { reason: 'invalid_json' });
      m.gauge('outboxOldestPendingAge', 7);
    }, { outboxPoller: { durationMs: 80, error: true } }),
  ];
  const series = (title: string) => widgetSeries(widgets.find((w) => w.properties.title === title)!, rounds);

  it('sums counters and takes the maximum of gauges per round, leaving rounds without data empty', () => {
    const throughput = series('Outbox throughput by status');
    assert.deepEqual(throughput.map((s) => [s.label, s.values]), [['sent', [7, null]], ['retried', [null, null]], ['dead', [null, 1]]]);
    assert.deepEqual(series('Oldest pending age (s)').find((s) => s.label === 'outbox')?.values, [3, 7]);
  });

  it('draws a SEARCH panel as one series per dimension value, and Lambda panels from the measured invocations', () => {
    assert.deepEqual(series('Inbox rejections by reason').map((s) => [s.label, s.values]), [['invalid_json', [null, 2]], ['unauthorized', [1, null]]]);
    assert.deepEqual(series('Function errors').find((s) => s.label === 'outboxPoller')?.values, [0, 1]);
    assert.deepEqual(series('Function duration (ms, max)').find((s) => s.label === 'outboxPoller')?.values, [120, 80]);
  });

  it('renders every widget of the definition with its title, and says so when a panel has no data', () => {
    const html = dashboardHtml(body, rounds, 'sample');
    assert.ok(widgets.length >= 10);
    for (const w of widgets) assert.ok(html.includes(`>${w.properties.title.replace(/&/g, '&amp;')}</text>`), w.properties.title);
    assert.ok(html.includes('No data in this run'), 'the retention panel has no data');
    assert.equal((html.match(/<svg /g) ?? []).length, widgets.length);
  });

  it('charts the relay failures per configured source from the EMF lines the relay report writes, a source no longer configured as (unknown source)', () => {
    const logger = { warn: () => {}, error: () => {} };
    const failure = (id: string, source: string): RelayFailure => ({
      row: { id, source, idempotencyKey: id, aggregateId: null, eventType: 'x', payload: {}, payloadText: '{}', headers: {}, correlationId: null, attempt: 0, createdAt: new Date(), claimToken: id, leaseExpiresAt: new Date() },
      errorClass: 'Error',
      error: 'refused',
    });
    const failures = [
      round((metrics) => {
        reportRelayFailures({ logger, metrics, sources: config.inbox.sources }, 'retried', [failure('a', 'stripe'), failure('b', 'stripe'), failure('c', 'removed')]);
      }),
      round((metrics) => {
        reportRelayFailures({ logger, metrics, sources: config.inbox.sources }, 'dead', [failure('d', 'partner'), failure('e', 'removed')]);
      }),
    ];
    const panel = widgets.find((w) => w.properties.title === 'Inbox relay retried and dead rows by source')!;
    assert.deepEqual(
      widgetSeries(panel, failures).map((s) => [s.label, s.values]),
      [
        ['partner retried', [null, null]],
        ['partner dead', [null, 1]],
        ['stripe retried', [2, null]],
        ['stripe dead', [null, null]],
        ['(unknown source) retried', [1, null]],
        ['(unknown source) dead', [null, 1]],
      ],
    );
  });

  it('draws the last-finished-pass log widget as a table: per function, the last round whose EMF lines carry its heartbeat', () => {
    const withPasses = [
      round((m) => {
        m.count('passesFinished', 1, { function: 'outboxPoller' });
        m.count('passesFinished', 1, { function: 'reclaim' });
      }),
      round((m) => m.count('passesFinished', 1, { function: 'outboxPoller' })),
      round((m) => m.count('outboxMessages', 1, { status: 'sent' })),
    ];
    const table = widgets.find((w) => w.properties.title === 'Last finished pass')!;
    assert.equal(table.type, 'log');
    assert.deepEqual(logTableRows(table, withPasses), [['outboxPoller', 'round 2'], ['reclaim', 'round 1']], 'inboxRelay never finished a pass in this run');
  });
});
