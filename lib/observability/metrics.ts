/**
 * EMF metrics through Powertools Metrics.
 *
 * A pass records counts and gauges in memory and `flush()` writes them as CloudWatch Embedded
 * Metric Format lines, one line per distinct dimension set (Powertools applies a line's
 * dimensions to every metric on it). Names come only from `METRICS`.
 */
import { Metrics as PowertoolsMetrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { METRICS, type MetricKey } from './metric-names.ts';

export type Dimensions = Record<string, string>;

interface Entry {
  key: MetricKey;
  dimensions: Dimensions;
  value: number;
  kind: 'count' | 'gauge';
}

export interface MetricsOptions {
  namespace: string;
  serviceName: string;
  /** Receives each EMF JSON line; default: standard output. */
  write?: (line: string) => void;
}

/**
 * The buffer key of a metric and dimension set: the values in the metric's declared dimension
 * order (a pass records a metric per destination call, so this stays cheap: no sort, no JSON).
 * Throws on a dimension the metric does not declare.
 */
function entryId(key: MetricKey, dimensions: Dimensions): string {
  const allowed = METRICS[key].dimensions as readonly string[];
  let given = 0;
  let id: string = key;
  for (const name of allowed) {
    const value = dimensions[name];
    if (value === undefined) id += '|\u0001';
    else {
      id += `|${value}`;
      given++;
    }
  }
  if (given !== Object.keys(dimensions).length) {
    const unknown = Object.keys(dimensions).find((name) => !allowed.includes(name));
    throw new Error(`metric ${METRICS[key].name} has no dimension ${unknown}`);
  }
  return id;
}

/** Collects metrics of one pass; `flush()` emits them. Not shared across invocations. */
export class QueueBoxMetrics {
  readonly #entries = new Map<string, Entry>();
  /** Counts already flushed, so `value` reports the whole run however often it flushed. */
  readonly #flushed = new Map<string, number>();
  readonly #options: MetricsOptions;

  constructor(options: MetricsOptions) {
    this.#options = options;
  }

  /** Adds `value` to a counter. */
  count(key: MetricKey, value = 1, dimensions: Dimensions = {}): void {
    if (value === 0) return;
    this.#put(key, dimensions, value, 'count');
  }

  /** Sets a gauge (last value wins within a flush). For durations, several values are summed into one sample each. */
  gauge(key: MetricKey, value: number, dimensions: Dimensions = {}): void {
    this.#put(key, dimensions, value, 'gauge');
  }

  #put(key: MetricKey, dimensions: Dimensions, value: number, kind: Entry['kind']): void {
    const id = entryId(key, dimensions);
    const existing = this.#entries.get(id);
    if (existing && kind === 'count') existing.value += value;
    else this.#entries.set(id, { key, dimensions, value, kind });
  }

  /** Value of a counter since this object was created, flushed or not; a gauge's unflushed value (tests, summaries). */
  value(key: MetricKey, dimensions: Dimensions = {}): number {
    const id = entryId(key, dimensions);
    return (this.#flushed.get(id) ?? 0) + (this.#entries.get(id)?.value ?? 0);
  }

  /**
   * Writes every recorded metric as EMF and clears the buffer; what Powertools'
   * `publishStoredMetrics` does, one line per dimension set. A pass calls it after a step whose
   * counts must not be lost with a killed invocation (reclaim, lost claims), and at its end.
   */
  flush(): void {
    const groups = new Map<string, Entry[]>();
    for (const [id, entry] of this.#entries) {
      if (entry.kind === 'count') this.#flushed.set(id, (this.#flushed.get(id) ?? 0) + entry.value);
    }
    for (const entry of this.#entries.values()) {
      const id = JSON.stringify(Object.entries(entry.dimensions).sort());
      const group = groups.get(id) ?? [];
      group.push(entry);
      groups.set(id, group);
    }
    const write = this.#options.write ?? ((line: string) => process.stdout.write(`${line}\n`));
    for (const entries of groups.values()) {
      const emitter = new PowertoolsMetrics({ namespace: this.#options.namespace, serviceName: this.#options.serviceName });
      emitter.addDimensions(entries[0]!.dimensions);
      for (const entry of entries) {
        const unit = METRICS[entry.key].unit === 'Seconds' ? MetricUnit.Seconds : MetricUnit.Count;
        emitter.addMetric(METRICS[entry.key].name, unit, entry.value);
      }
      write(JSON.stringify(emitter.serializeMetrics()));
      emitter.clearMetrics();
    }
    this.#entries.clear();
  }
}
