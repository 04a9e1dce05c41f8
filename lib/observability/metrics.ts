/**
 * EMF metrics through Powertools Metrics.
 *
 * A pass records counts and gauges in memory and `flush()` writes them as CloudWatch Embedded
 * Metric Format lines, one line per distinct dimension set (Powertools applies a line's
 * dimensions to every metric on it). Names come only from `METRICS`.
 */
import { Metrics as PowertoolsMetrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { UsageError } from '../errors.ts';
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
  /**
   * Receives each EMF JSON line; default: standard output — unless Powertools' own switch turns
   * its metrics off (`POWERTOOLS_METRICS_DISABLED=true`, or `POWERTOOLS_DEV=true` without it), as it
   * would for `Metrics` of its own. A `write` given here is the caller's choice, and always writes.
   */
  write?: (line: string) => void;
}

/**
 * The buffer key of a metric and dimension set: the values in the metric's declared dimension
 * order (a pass records a metric per destination call, so this stays cheap: no sort, no JSON).
 * Throws a `UsageError` unless `dimensions` holds exactly the metric's declared dimensions, each
 * a value CloudWatch takes (`dimensionProblem`): a missing one would publish the metric under a
 * dimension set no panel or alarm queries (`monitoring.ts` queries exactly the declared ones), an
 * unknown one a new series, and Powertools drops an empty value with a warning (the same miss).
 * Valid values hold no control character, so the separator keeps two dimension sets apart.
 */
function entryId(key: MetricKey, dimensions: Dimensions): string {
  const allowed = METRICS[key].dimensions as readonly string[];
  let id: string = key;
  for (const name of allowed) {
    const value: unknown = dimensions[name];
    if (value === undefined) throw new UsageError(`metric ${METRICS[key].name} needs dimension ${name} (it is written with ${declared(key)})`);
    const problem = dimensionProblem(value);
    if (problem !== undefined) throw new UsageError(`metric ${METRICS[key].name}: dimension ${name} ${problem}`);
    id += `\u0001${value as string}`;
  }
  if (allowed.length !== Object.keys(dimensions).length) {
    const unknown = Object.keys(dimensions).find((name) => !allowed.includes(name));
    throw new UsageError(`metric ${METRICS[key].name} has no dimension ${unknown} (it is written with ${declared(key)})`);
  }
  return id;
}

/** The declared dimensions of a metric, for messages. */
function declared(key: MetricKey): string {
  const names = METRICS[key].dimensions as readonly string[];
  return names.length === 0 ? 'no dimension of its own' : `exactly ${names.join(', ')}`;
}

/**
 * What CloudWatch refuses in a dimension value (API `Dimension`: 1 to 1024 ASCII characters, not
 * only whitespace, no control character), or `undefined` for a good one.
 */
function dimensionProblem(value: unknown): string | undefined {
  if (typeof value !== 'string') return `is a ${typeof value}, not a string`;
  if (value.trim() === '') return `is ${JSON.stringify(value)}: a value needs a character other than whitespace`;
  if (value.length > 1024) return `is ${value.length} characters long: at most 1024`;
  if (/[^\x20-\x7e]/.test(value)) return `is ${JSON.stringify(value)}: only printable ASCII characters`;
  return undefined;
}

/**
 * Why a metric value cannot be written, or `undefined`: EMF writes NaN and ±Infinity as `null`,
 * which CloudWatch drops, and every QueueBox metric is a count, an age or a duration, never below 0.
 */
function valueProblem(value: unknown): string | undefined {
  if (typeof value !== 'number' || !Number.isFinite(value)) return `is ${String(value)}, not a finite number`;
  if (value < 0) return `is ${value}: a count, age or duration is never below 0`;
  return undefined;
}

/** `entryId`, after refusing a value that cannot be written. */
function checkedId(key: MetricKey, value: unknown, dimensions: Dimensions): string {
  const problem = valueProblem(value);
  if (problem !== undefined) throw new UsageError(`metric ${METRICS[key].name}: value ${problem}`);
  return entryId(key, dimensions);
}

/** Powertools' serializer, with its own reading of its environment switch (`isDisabled`, protected). */
class Emitter extends PowertoolsMetrics {
  get switchedOff(): boolean {
    return this.isDisabled();
  }
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

  /**
   * Adds `value` to a counter. Throws a `UsageError` for a value that is not a finite number of at
   * least 0, or dimensions other than exactly the metric's declared ones (`entryId`).
   */
  count(key: MetricKey, value = 1, dimensions: Dimensions = {}): void {
    // Checked before a 0 is skipped, so a bad call fails whatever its value.
    const id = checkedId(key, value, dimensions);
    if (value === 0) return;
    this.#put(id, key, dimensions, value, 'count');
  }

  /**
   * Sets a gauge: the last value set before a flush is the one written (a pass that wants the
   * slowest of several durations keeps the maximum itself, as the outbox pass does). Same checks
   * as `count`.
   */
  gauge(key: MetricKey, value: number, dimensions: Dimensions = {}): void {
    this.#put(checkedId(key, value, dimensions), key, dimensions, value, 'gauge');
  }

  #put(id: string, key: MetricKey, dimensions: Dimensions, value: number, kind: Entry['kind']): void {
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
   * counts must not be lost with a killed invocation (reclaim, lost claims), and at its end. A
   * line leaves the buffer once its `write` returned: a sink that throws part-way keeps the lines
   * it did not write, and the next flush writes those only, never a written line again.
   */
  flush(): void {
    const groups = new Map<string, Array<[string, Entry]>>();
    for (const [id, entry] of this.#entries) {
      const group = JSON.stringify(Object.entries(entry.dimensions).sort());
      const entries = groups.get(group) ?? [];
      entries.push([id, entry]);
      groups.set(group, entries);
    }
    const write = this.#options.write ?? ((line: string) => process.stdout.write(`${line}\n`));
    for (const entries of groups.values()) {
      const emitter = new Emitter({ namespace: this.#options.namespace, serviceName: this.#options.serviceName });
      // Switched off by Powertools' environment: counted (`value`), not written.
      const quiet = this.#options.write === undefined && emitter.switchedOff;
      emitter.addDimensions(entries[0]![1].dimensions);
      for (const [, entry] of entries) {
        const unit = METRICS[entry.key].unit === 'Seconds' ? MetricUnit.Seconds : MetricUnit.Count;
        emitter.addMetric(METRICS[entry.key].name, unit, entry.value);
      }
      const line = JSON.stringify(emitter.serializeMetrics());
      emitter.clearMetrics();
      if (!quiet) write(line);
      for (const [id, entry] of entries) {
        if (entry.kind === 'count') this.#flushed.set(id, (this.#flushed.get(id) ?? 0) + entry.value);
        this.#entries.delete(id);
      }
    }
  }
}

/**
 * A flush of `metrics` queued for the end of the current microtask queue, once per burst (a
 * renewal that loses many claims counts each, and writes them once), right after the step that
 * counted — so that an invocation killed later does not take the counts with it. A sink that
 * throws is handed to `onError` (the caller chooses: fail its pass, or log), never thrown into
 * the microtask, which would end the process.
 */
export function flushSoonOf(metrics: Pick<QueueBoxMetrics, 'flush'>, onError: (error: unknown) => void): () => void {
  let queued = false;
  return () => {
    if (queued) return;
    queued = true;
    queueMicrotask(() => {
      queued = false;
      try {
        metrics.flush();
      } catch (error) {
        onError(error);
      }
    });
  };
}
