/**
 * Classification of an error thrown by a whole SDK call (`SendMessageBatch`, `PutEvents`): the
 * same outcome then applies to every entry of the call.
 *
 * Retryable: an aborted call, network errors (no HTTP response), HTTP 5xx, 408 and 429, throttling
 * codes, and anything the SDK marks `$retryable`. Every other 4xx is permanent but not `deadNow`:
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
  /** The SDK error's name (`QueueDoesNotExist`), or its code when the name is the bare `Error` (`ECONNREFUSED`); `Aborted` for an aborted call. */
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

/** Classifies a whole-call error; `operation` (e.g. `SQS SendMessageBatch`) prefixes the message. */
export function classifyCallError(operation: string, error: unknown, signal?: AbortSignal): CallFailure {
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
