/**
 * The registry of bench cases, in the order a full run executes them.
 */
import type { BenchCase } from './bench-case.ts';
import { floorCase } from './floor-case.ts';
import { graphileWorkerCase } from './graphile-worker-case.ts';
import { pgBossCase } from './pg-boss-case.ts';
import { queueboxNoopCase, queueboxPreparedCase, queueboxSqsCase } from './queuebox-case.ts';

/** Every case, by name. */
export const CASES: readonly BenchCase[] = [floorCase, queueboxNoopCase, queueboxPreparedCase, queueboxSqsCase, pgBossCase, graphileWorkerCase];

/** The case named `name`; throws for an unknown name. */
export function caseByName(name: string): BenchCase {
  const found = CASES.find((c) => c.name === name);
  if (!found) throw new Error(`unknown bench case ${name}; known: ${CASES.map((c) => c.name).join(', ')}`);
  return found;
}
