/**
 * The driver conformance suite on PostgreSQL (a fresh schema of the run's server).
 */
import { runDriverConformance } from './driver-conformance.ts';
import { createPostgresTarget } from './postgres-target.ts';

runDriverConformance('postgres', createPostgresTarget);
