/**
 * The registry of bench cases, in the order a full run executes them. Each case module is loaded
 * only when its case runs, so a child's RSS holds its own libraries only (pg-boss and
 * graphile-worker are not in QueueBox's process, nor QueueBox's AWS SDK in theirs).
 */
import type { BenchCase } from './bench-case.ts';

const LOADERS: Record<string, () => Promise<BenchCase>> = {
  floor: async () => (await import('./floor-case.ts')).floorCase,
  queuebox: async () => (await import('./queuebox-case.ts')).queueboxNoopCase,
  'queuebox-rows-1': async () => (await import('./queuebox-case.ts')).queueboxRows1Case,
  'queuebox-rows-4': async () => (await import('./queuebox-case.ts')).queueboxRows4Case,
  'queuebox-prepared': async () => (await import('./queuebox-case.ts')).queueboxPreparedCase,
  'queuebox-sqs': async () => (await import('./queuebox-case.ts')).queueboxSqsCase,
  'queuebox-rows-1-sqs': async () => (await import('./queuebox-case.ts')).queueboxSqsRows1Case,
  'pg-boss': async () => (await import('./pg-boss-case.ts')).pgBossCase,
  'graphile-worker': async () => (await import('./graphile-worker-case.ts')).graphileWorkerCase,
};

/** Every case name, in run order. */
export const CASE_NAMES: readonly string[] = Object.keys(LOADERS);

/** Loads the case named `name`; throws for an unknown name. */
export async function loadCase(name: string): Promise<BenchCase> {
  const load = LOADERS[name];
  if (!load) throw new Error(`unknown bench case ${name}; known: ${CASE_NAMES.join(', ')}`);
  const found = await load();
  if (found.name !== name) throw new Error(`bench case module for ${name} exports case ${found.name}`);
  return found;
}
