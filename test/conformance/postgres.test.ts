/**
 * The driver conformance suite on PostgreSQL (a fresh schema of the run's server): with the default
 * configuration (claim functions made for batches of 100: the suite's smaller claims send their
 * statements), with claim functions for the suite's most common batch size (10), and with
 * `database.preparedStatements`.
 */
import { runDriverConformance } from './driver-conformance.ts';
import { createPostgresTarget } from './postgres-target.ts';

runDriverConformance('postgres', () => createPostgresTarget());
// The outbox claims of 10 rows through the functions `migrate` made for that batch size.
runDriverConformance('postgres, outbox claim functions (batch size 10)', () => createPostgresTarget({ outboxBatchSize: 10 }));
// The same suite with the claims as named prepared statements (planned once per connection).
runDriverConformance('postgres, database.preparedStatements', () => createPostgresTarget({ preparedStatements: true }));
