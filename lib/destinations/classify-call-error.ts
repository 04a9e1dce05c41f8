/**
 * Classification of an error thrown by a whole SDK call (`SendMessageBatch`, `PutEvents`): the
 * same outcome then applies to every entry of the call.
 *
 * Retryable: an aborted call, a call that ran past its destination's `callTimeoutMs` (`timedCall`),
 * network errors (no HTTP response), HTTP 5xx, 408 and 429, throttling codes, and anything the SDK
 * marks `$retryable`. Every other 4xx is permanent but not `deadNow`:
 * a missing queue, a wrong bus or missing IAM permission is fixed by an operator, so the row keeps
 * its remaining attempts rather than dying at once.
 */

/** Error codes that mean "slow down", whatever the HTTP status. */
export const THROTTLING_CODES: ReadonlySet<string> = new Set([
  'ThrottlingException',
  'Throttling',
  'ThrottledException',
  'RequestThrottled',
  'RequestThrottledException',
  'AWS.SimpleQueueService.RequestThrottled',
  'KMS.ThrottlingException',
  'KmsThrottled',
  'TooManyRequestsException',
  'RequestLimitExceeded',
  'SlowDown',
]);

/** Outcome of a failed call for each of its entries. */
export interface CallFailure {
  status: 'retryable' | 'permanent';
  error: string;
  /** The SDK error's name (`QueueDoesNotExist`), or its code when the name is the bare `Error` (`ECONNREFUSED`); `Aborted` for an aborted call, `CallTimeout` for one that timed out. */
  errorClass: string;
}

interface SdkErrorShape {
  name?: unknown;
  code?: unknown;
  /** Query-compatible error code (e.g. `AWS.SimpleQueueService.NonExistentQueue`). */
  Code?: unknown;
  message?: unknown;
  $retryable?: unknown;
  $metadata?: { httpStatusCode?: unknown };
}

/** True when the error is the SDK's (or the platform's) answer to an aborted signal. */
export function isAbortError(error: unknown, signal?: AbortSignal): boolean {
  if (signal?.aborted) return true;
  const name = (error as SdkErrorShape | null)?.name;
  return name === 'AbortError';
}

/**
 * Classifies a whole-call error; `operation` (e.g. `SQS SendMessageBatch`) prefixes the message.
 * `signal` is the call's (`timedCall`): aborted first by the timeout, the call timed out.
 */
export function classifyCallError(operation: string, error: unknown, signal?: AbortSignal): CallFailure {
  if (signal?.aborted && signal.reason instanceof CallTimeoutError) return { status: 'retryable', error: `${operation} ${signal.reason.message}`, errorClass: 'CallTimeout' };
  if (isAbortError(error, signal)) return { status: 'retryable', error: 'aborted', errorClass: 'Aborted' };
  const shape = (typeof error === 'object' && error !== null ? error : {}) as SdkErrorShape;
  const name = typeof shape.name === 'string' ? shape.name : 'Error';
  const code = typeof shape.Code === 'string' ? shape.Code : typeof shape.code === 'string' ? shape.code : undefined;
  const message = typeof shape.message === 'string' ? shape.message : String(error);
  const status = typeof shape.$metadata?.httpStatusCode === 'number' ? shape.$metadata.httpStatusCode : undefined;
  const label = `${name}${code && code !== name ? ` (${code})` : ''}${status !== undefined ? ` HTTP ${status}` : ''}`;
  const text = `${operation} failed: ${label}: ${message}`;
  const retryable =
    Boolean(shape.$retryable) ||
    THROTTLING_CODES.has(name) ||
    (code !== undefined && THROTTLING_CODES.has(code)) ||
    status === undefined ||
    status >= 500 ||
    status === 408 ||
    status === 429;
  const errorClass = name === 'Error' && code !== undefined ? code : name;
  return { status: retryable ? 'retryable' : 'permanent', error: text, errorClass };
}

/** One SDK call's abort: the caller's signal or the destination's call timeout, whichever comes first. */
export interface TimedCall {
  /**
   * Aborts when the caller's signal does (lost claim, pass stopped) or when the timeout ends; its
   * reason is the first one's, a `CallTimeoutError` for the timeout (`classifyCallError` reads it).
   */
  readonly signal: AbortSignal;
  /** Clears the timer; call once the call has ended, so no timer outlives its call. */
  dispose(): void;
}

/**
 * The abort of one call to the destination `destination` (its config name), at most `timeoutMs`
 * long. The SDK clients have no request timeout: a peer that accepts the connection and never
 * answers (a half-open connection, a black-holed NAT) keeps the call open until the caller aborts
 * it, and the pass settles a claimed batch only once every call of it answered, so one such call
 * would hold the whole batch (rows other calls got accepted included) and its keys until the
 * deadline. The SDK ends the request, and its socket, when the signal aborts. A timer cleared at
 * the end of the call rather than `AbortSignal.timeout`, so no timer stays armed per answered call.
 */
export function timedCall(signal: AbortSignal | undefined, timeoutMs: number, destination: string): TimedCall {
  const timer = new AbortController();
  const handle = setTimeout(() => timer.abort(new CallTimeoutError(timeoutMs, destination)), timeoutMs);
  return {
    signal: signal === undefined ? timer.signal : AbortSignal.any([signal, timer.signal]),
    dispose: () => clearTimeout(handle),
  };
}

/** The reason of a call aborted by its destination's `callTimeoutMs`. */
export class CallTimeoutError extends Error {
  override readonly name = 'CallTimeout';

  constructor(
    readonly timeoutMs: number,
    readonly destination: string,
  ) {
    super(`timed out after ${timeoutMs} ms without an answer (destinations.${destination}.callTimeoutMs); the call was aborted`);
  }
}
