/**
 * Thrown only inside a pull worker, into the handler, when its claim is gone: `transaction()` was
 * called after the lease was lost, or the fenced completion changed no row (the business
 * transaction was rolled back). The worker recognises it and changes nothing more on the row.
 *
 * The low-level `PullClient` never throws it: there, a lost claim is the outcome
 * `{ ok: false, reason: 'ownership-lost' }`.
 */
import { QueueBoxError } from '../errors.ts';

export class OwnershipLostError extends QueueBoxError {
  override readonly name = 'OwnershipLostError';
  constructor(
    /** Id of the inbox row whose claim was lost. */
    readonly messageId: string,
    detail = 'the claim was lost',
  ) {
    super(`pull message ${messageId}: ${detail}; nothing was committed`);
  }
}
