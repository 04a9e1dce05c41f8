/**
 * Powertools' switch for its metrics — `POWERTOOLS_METRICS_DISABLED`, or `POWERTOOLS_DEV` when
 * that is unset — turns off QueueBox's EMF lines on standard output as it does Powertools' own
 * (QueueBox serializes with Powertools but writes the lines itself). The counts are still kept
 * (`value`, the pass summaries); a `write` sink the caller gives always writes.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';

const VARIABLES = ['POWERTOOLS_METRICS_DISABLED', 'POWERTOOLS_DEV'] as const;
const saved = Object.fromEntries(VARIABLES.map((name) => [name, process.env[name]]));

/** The EMF lines one flush of a counted `outboxMessages` writes to standard output, with `env` set. */
function stdoutLines(env: Partial<Record<(typeof VARIABLES)[number], string>>, write?: (line: string) => void): { lines: string[]; value: number } {
  for (const name of VARIABLES) {
    if (env[name] === undefined) delete process.env[name];
    else process.env[name] = env[name];
  }
  const lines: string[] = [];
  const original = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array) => {
    const text = String(chunk);
    if (text.includes('_aws')) lines.push(text);
    else original(chunk);
    return true;
  }) as typeof process.stdout.write;
  try {
    const metrics = new QueueBoxMetrics({ namespace: 'NS', serviceName: 'svc', ...(write ? { write } : {}) });
    metrics.count('outboxMessages', 3, { status: 'sent' });
    metrics.flush();
    return { lines, value: metrics.value('outboxMessages', { status: 'sent' }) };
  } finally {
    process.stdout.write = original;
  }
}

describe("QueueBoxMetrics and Powertools' metrics switch", () => {
  afterEach(() => {
    for (const name of VARIABLES) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
  });

  it('writes to standard output by default', () => {
    const { lines, value } = stdoutLines({});
    assert.equal(lines.length, 1);
    assert.match(lines[0]!, /"queuebox_outbox_messages_total":3/);
    assert.equal(value, 3);
  });

  it('writes nothing with POWERTOOLS_METRICS_DISABLED=true, and still counts', () => {
    const { lines, value } = stdoutLines({ POWERTOOLS_METRICS_DISABLED: 'true' });
    assert.deepEqual(lines, []);
    assert.equal(value, 3);
  });

  it('writes nothing with POWERTOOLS_DEV=true alone; POWERTOOLS_METRICS_DISABLED=false takes precedence', () => {
    assert.equal(stdoutLines({ POWERTOOLS_DEV: 'true' }).lines.length, 0);
    assert.equal(stdoutLines({ POWERTOOLS_DEV: 'true', POWERTOOLS_METRICS_DISABLED: 'false' }).lines.length, 1);
  });

  it("always writes to a sink the caller gave", () => {
    const given: string[] = [];
    stdoutLines({ POWERTOOLS_METRICS_DISABLED: 'true' }, (line) => given.push(line));
    assert.equal(given.length, 1);
  });
});
