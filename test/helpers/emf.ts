/**
 * Reads CloudWatch Embedded Metric Format lines as CloudWatch would: each metric of a line's
 * directive, with the line's dimension values. `emfValue` sums a metric over the lines whose
 * dimensions match.
 */

interface EmfLine {
  _aws: { CloudWatchMetrics: Array<{ Namespace: string; Dimensions: string[][]; Metrics: Array<{ Name: string; Unit: string }> }> };
  [field: string]: unknown;
}

/** One published value: metric name, namespace, full dimension map, value. */
export interface EmfSample {
  name: string;
  namespace: string;
  dimensions: Record<string, string>;
  value: number;
}

/** Parses EMF JSON lines (other lines are ignored) into samples. */
export function emfSamples(lines: readonly string[]): EmfSample[] {
  const samples: EmfSample[] = [];
  for (const line of lines) {
    if (!line.startsWith('{')) continue;
    const doc = JSON.parse(line) as EmfLine;
    if (doc._aws === undefined) continue;
    for (const directive of doc._aws.CloudWatchMetrics) {
      const dimensions = Object.fromEntries((directive.Dimensions[0] ?? []).map((d) => [d, String(doc[d])]));
      for (const metric of directive.Metrics) samples.push({ name: metric.Name, namespace: directive.Namespace, dimensions, value: Number(doc[metric.Name]) });
    }
  }
  return samples;
}

/** Sum of `name` over the samples whose dimensions include every entry of `dimensions`. */
export function emfValue(lines: readonly string[], name: string, dimensions: Record<string, string> = {}): number {
  return emfSamples(lines)
    .filter((s) => s.name === name && Object.entries(dimensions).every(([k, v]) => s.dimensions[k] === v))
    .reduce((sum, s) => sum + s.value, 0);
}
