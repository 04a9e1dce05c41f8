/**
 * Runs concurrent local invocations as Lambda runs concurrent invocations of one execution
 * environment: each inside its own invocation context of the Lambda runtime's `InvokeStore`, with
 * `AWS_LAMBDA_MAX_CONCURRENCY` set. Powertools Logger then keeps each invocation's Lambda context
 * (request id, function name, cold start) to that invocation, so the log lines of overlapping
 * local invocations never carry another invocation's request id.
 */
import { InvokeStore, InvokeStoreBase } from '@aws/lambda-invoke-store';
import type { Context } from 'aws-lambda';

/** Runs `work` as the invocation of `context`. */
export type InvocationScope = <T>(context: Context, work: () => Promise<T>) => Promise<T>;

/** Concurrent invocations a local run allows in one environment (the variable's value). */
const LOCAL_MAX_CONCURRENCY = '64';

/**
 * Sets up the store (once per process) and returns the scope; `restore()` puts
 * `AWS_LAMBDA_MAX_CONCURRENCY` back as it was.
 */
export async function createInvocationScope(): Promise<{ scope: InvocationScope; restore: () => void }> {
  const previous = process.env.AWS_LAMBDA_MAX_CONCURRENCY;
  process.env.AWS_LAMBDA_MAX_CONCURRENCY ??= LOCAL_MAX_CONCURRENCY;
  const store = await InvokeStore.getInstanceAsync(true);
  return {
    scope: (context, work) => store.run({ [InvokeStoreBase.PROTECTED_KEYS.REQUEST_ID]: context.awsRequestId }, work),
    restore: () => {
      if (previous === undefined) delete process.env.AWS_LAMBDA_MAX_CONCURRENCY;
      else process.env.AWS_LAMBDA_MAX_CONCURRENCY = previous;
    },
  };
}
