/**
 * A real-shaped Lambda `Context` whose `getRemainingTimeInMillis()` counts down from a timeout.
 *
 * The local runner invokes the real handlers with it; tests use it to prove deadline handling.
 */
import { randomUUID } from 'node:crypto';
import type { Context } from 'aws-lambda';

export interface InvocationContextOptions {
  functionName?: string;
  /** Invocation timeout in milliseconds (the function's `timeout`). */
  timeoutMs: number;
  memoryLimitInMB?: number;
  /** The alias or version the invocation came through (the end of `invokedFunctionArn`); default none. */
  invokedQualifier?: string;
  /** `functionVersion`: the version that runs (an alias's version); default `$LATEST`. */
  functionVersion?: string;
  /** Clock to count down against; tests can freeze or skew it. Default `Date.now`. */
  now?: () => number;
}

export function createInvocationContext(options: InvocationContextOptions): Context {
  const now = options.now ?? Date.now;
  const deadline = now() + options.timeoutMs;
  const functionName = options.functionName ?? 'queuebox-local';
  return {
    callbackWaitsForEmptyEventLoop: false,
    functionName,
    functionVersion: options.functionVersion ?? '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:us-east-1:000000000000:function:${functionName}${options.invokedQualifier === undefined ? '' : `:${options.invokedQualifier}`}`,
    memoryLimitInMB: String(options.memoryLimitInMB ?? 512),
    awsRequestId: randomUUID(),
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: `local/${randomUUID()}`,
    getRemainingTimeInMillis: () => Math.max(0, deadline - now()),
    done: () => {},
    fail: () => {},
    succeed: () => {},
  };
}
