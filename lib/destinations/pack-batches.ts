/**
 * Splitting of a destination batch into calls that respect a service's request limits.
 */
import type { CallProgress, EntryOutcome, OutboundMessage } from './destination.ts';

/**
 * Splits `entries`, keeping their order, into groups of at most `maxEntries` whose `bytes` add up
 * to at most `maxBytes`. Each entry is assumed to fit alone (callers reject larger ones first).
 */
export function packBatches<T extends { bytes: number }>(entries: readonly T[], maxEntries: number, maxBytes: number): T[][] {
  const calls: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const entry of entries) {
    if (current.length === maxEntries || (current.length > 0 && bytes + entry.bytes > maxBytes)) {
      calls.push(current);
      current = [];
      bytes = 0;
    }
    current.push(entry);
    bytes += entry.bytes;
  }
  if (current.length > 0) calls.push(current);
  return calls;
}

/**
 * The shared shape of a destination's `publishBatch`: prepare every message (a message that can
 * never be accepted is permanent and dead at once, with the class `prepare` gives), pack the rest into calls within the limits,
 * send the calls one after another, and return one outcome per message, in input order.
 *
 * When the batch takes several calls, `progress` is told of each call before it is sent (and
 * leaves out the messages whose claim was lost meanwhile) and of its outcomes when it answers (and
 * of the refused messages first), so the pass can settle what answered when it stops waiting with
 * a later call open. A call whose `signal` is already aborted is not offered (`send` answers it
 * without sending).
 */
export async function publishInCalls<T extends { bytes: number; index: number }>(
  messages: readonly OutboundMessage[],
  limits: { maxEntries: number; maxBytes: number },
  prepare: (message: OutboundMessage, index: number) => T | { error: string; errorClass: string },
  send: (call: T[]) => Promise<EntryOutcome[]>,
  options: { signal?: AbortSignal | undefined; progress?: CallProgress | undefined } = {},
): Promise<EntryOutcome[]> {
  const outcomes: EntryOutcome[] = new Array(messages.length);
  const prepared: T[] = [];
  const refused: number[] = [];
  messages.forEach((message, index) => {
    const result = prepare(message, index);
    if ('error' in result) {
      outcomes[index] = { id: message.id, status: 'permanent', error: result.error, deadNow: true, errorClass: result.errorClass };
      refused.push(index);
    } else prepared.push(result);
  });
  const calls = packBatches(prepared, limits.maxEntries, limits.maxBytes);
  // One call answers the whole batch at once: nothing to tell before the batch ends.
  const progress = calls.length > 1 ? options.progress : undefined;
  if (progress !== undefined && refused.length > 0) progress.answered(refused, refused.map((i) => outcomes[i]!));
  // One call after another: a `publishBatch` is one of the pass's `outbox.concurrency` call
  // slots, so the calls a batch of large messages is split into share it instead of each taking
  // one (ten messages of 600 KB were ten SQS calls of up to 1 MiB at once with a concurrency of 1).
  for (let call of calls) {
    let indexes: readonly number[] | undefined;
    if (progress !== undefined && options.signal?.aborted !== true) {
      indexes = progress.offering(call.map((entry) => entry.index));
      if (indexes.length < call.length) {
        const offered = new Set(indexes);
        for (const entry of call) {
          if (!offered.has(entry.index)) outcomes[entry.index] = { id: messages[entry.index]!.id, status: 'retryable', error: 'not sent: its claim was lost before its call', errorClass: 'ClaimLost' };
        }
        call = call.filter((entry) => offered.has(entry.index));
        if (call.length === 0) continue;
      }
    }
    const answers = await send(call);
    for (const [i, outcome] of answers.entries()) outcomes[call[i]!.index] = outcome;
    if (indexes !== undefined) progress!.answered(indexes, answers);
  }
  return outcomes;
}
