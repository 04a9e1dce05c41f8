/**
 * What every PostgreSQL query module receives: the pool and the quoted object names.
 */
import type { PgNames } from './names.ts';
import type { PgPool } from './pg-pool.ts';
import type { ClaimFunctionState } from './claim-functions.ts';

export interface PgContext {
  pool: PgPool;
  names: PgNames;
  /** `database.preparedStatements`: claims run as named prepared statements (`pgClaimQuery`). */
  prepared?: boolean;
  /**
   * Claims call the functions `migrate` created for their statements (`claim-functions.ts`);
   * absent, or with `prepared`, every claim sends its statement.
   */
  claimFunctions?: ClaimFunctionState;
  /**
   * The outbox claim limit `migrate` created functions for (`outbox.batchSize`): a claim grown
   * past it (`outbox.maxBatchSize`) sends its statement, whose planning a large claim amortizes.
   */
  claimFunctionLimit?: number;
}

/** Milliseconds as a PostgreSQL interval expression on a bound parameter: `$n * interval '1 millisecond'`. */
export function msInterval(param: string): string {
  return `(${param}::double precision * interval '1 millisecond')`;
}
