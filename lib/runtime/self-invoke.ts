/**
 * Asynchronous invokes of a Lambda function (`InvocationType: 'Event'`): what scale-out starts
 * passes with. The AWS SDK's Lambda client is loaded on the first invoke (a dynamic import: the
 * bundles keep it in a chunk that a function with scale-out off never loads) and kept for the
 * container.
 */
import type { LambdaClient } from '@aws-sdk/client-lambda';
import { QueueBoxError } from '../errors.ts';

/** Sends `payload` (JSON) to `functionName` as an asynchronous event; resolves once Lambda accepted it (HTTP 202); gives up after `timeoutMs`. */
export type InvokeAsync = (functionName: string, payload: unknown, timeoutMs: number) => Promise<void>;

/**
 * What a pass's scale-out invokes: its own function, at the version or alias that invoked it. A
 * schedule that targets an alias (osls points events at the alias `provisioned` when a function
 * has `provisionedConcurrency`) or a version runs that code and that alias's provisioned
 * concurrency; an unqualified invoke would start `$LATEST` instead. Lambda accepts
 * `name:qualifier` as `FunctionName`. The qualifier is the eighth field of `invokedFunctionArn`
 * (`arn:aws:lambda:<region>:<account>:function:<name>:<qualifier>`); none, or `$LATEST`: the name
 * alone.
 */
export function selfInvokeTarget(context: { functionName: string; invokedFunctionArn?: string }): string {
  const qualifier = context.invokedFunctionArn?.split(':')[7];
  return qualifier === undefined || qualifier === '' || qualifier === '$LATEST' ? context.functionName : `${context.functionName}:${qualifier}`;
}

/** Lambda did not accept an asynchronous invoke. */
export class InvokeRefusedError extends QueueBoxError {
  override readonly name = 'InvokeRefusedError';
  constructor(
    readonly functionName: string,
    readonly statusCode: number | undefined,
  ) {
    super(`asynchronous invoke of ${functionName} answered status ${String(statusCode)}, not 202`);
  }
}

/**
 * An `InvokeAsync` over the AWS SDK. `client` builds the client (tests: an endpoint of their
 * own); default a client of the function's region (`AWS_REGION`), with the SDK's own retries.
 */
export function lambdaInvoker(client?: () => LambdaClient): InvokeAsync {
  let loaded: Promise<{ client: LambdaClient; InvokeCommand: typeof import('@aws-sdk/client-lambda').InvokeCommand }> | undefined;
  const load = () =>
    (loaded ??= import('@aws-sdk/client-lambda').then((sdk) => ({ client: client?.() ?? new sdk.LambdaClient({}), InvokeCommand: sdk.InvokeCommand })).catch((error: unknown) => {
      loaded = undefined;
      throw error;
    }));
  return async (functionName, payload, timeoutMs) => {
    const sdk = await load();
    const answer = await sdk.client.send(
      new sdk.InvokeCommand({ FunctionName: functionName, InvocationType: 'Event', Payload: new TextEncoder().encode(JSON.stringify(payload)) }),
      { abortSignal: AbortSignal.timeout(Math.max(1, Math.floor(timeoutMs))) },
    );
    if (answer.StatusCode !== 202) throw new InvokeRefusedError(functionName, answer.StatusCode);
  };
}
