/**
 * A fake Lambda context whose `getRemainingTimeInMillis()` really counts down.
 */
export { createInvocationContext as fakeLambdaContext } from '../../lib/runtime/invocation-context.ts';
