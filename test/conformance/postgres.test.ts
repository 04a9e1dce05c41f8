/**
 * The driver conformance suite on PostgreSQL (a fresh schema of the run's server), with unnamed
 * statements (the default) and with `database.preparedStatements`.
 */
import { runDriverConformance } from './driver-conformance.ts';
import { createPostgresTarget } from './postgres-target.ts';

runDriverConformance('postgres', () => createPostgresTarget());
// The same suite with the claims as named prepared statements (planned once per connection).
runDriverConformance('postgres, database.preparedStatements', () => createPostgresTarget({ preparedStatements: true }));
