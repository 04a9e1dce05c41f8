/**
 * The contract between the harness and one bench case (floor, queuebox, a peer).
 *
 * A case seeds its own fresh schema in `prepare` (not timed, not counted), moves exactly
 * `workload.drain` messages in `drain` (timed, round trips counted, stops early only at
 * `timeLimitMs`), and reports claim-to-sent latency in `latency` (not counted).
 */
import type pg from 'pg';
import type { Workload } from './workloads.ts';

export interface CaseContext {
  url: string;
  /** A fresh schema name owned by this case. */
  schema: string;
  workload: Workload;
  /** Parallel claim loops / passes / worker slots, as the case defines them. */
  workers: number;
  /** Wall-clock cap of the drain (ms); a capped case reports the rate it reached. */
  timeLimitMs: number;
  /** SQS emulator endpoint and queue, when the case needs them. */
  sqs?: { endpoint: string; queueUrl: string };
  /** Uncounted client for seeding, progress and latency queries. */
  probe: pg.Client;
  /**
   * The case's tunables for this run (the floor's batch size and loops, graphile-worker's
   * concurrency…), as the sweep chose them (bench/best-settings.json) or as a sweep tries them;
   * a case uses its own defaults for what is absent.
   */
  settings?: CaseSettings;
}

/** The schema a case's warm-up drains from (`case-child.ts`), next to the case's own. */
export const warmSchema = (schema: string): string => `${schema}_warm`;

/** Tunables of one case, by name (each case documents its own). */
export type CaseSettings = Record<string, number | string | boolean>;

export interface Latency {
  p50Ms: number;
  p99Ms: number;
}

export interface DrainResult {
  /** Messages moved to their finished state during the drain. */
  moved: number;
  /** True when the drain hit `timeLimitMs` before moving `workload.drain`. */
  capped: boolean;
  /** Case-specific counters (empty claims, unique-violation fetches, ...). */
  notes?: Record<string, number | string>;
}

export interface BenchCase {
  name: string;
  /** One line: what the case does and with which settings. */
  describe(ctx: CaseContext): string;
  prepare(ctx: CaseContext): Promise<void>;
  drain(ctx: CaseContext): Promise<DrainResult>;
  latency(ctx: CaseContext): Promise<Latency | null>;
  cleanup(ctx: CaseContext): Promise<void>;
}
