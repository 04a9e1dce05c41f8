/**
 * A claimed row carries its payload as JSON text (`payloadText`, every digit kept); the parsed
 * `payload` is a view of it, parsed on first read. Delivery reads only the text, so the hot
 * path parses nothing; code that wants an object (a custom destination, a test) still gets one.
 * The same holds for inbox rows (relay and pull claims) and the outbox messages the relay makes
 * of them: the relay forwards the text, and a parsed body can take many times its text's memory
 * (a 1 MiB body of `{}` elements is about 18 MB of heap once parsed).
 */

/**
 * Defines `target.payload` as the parse of `target.payloadText`, computed on first read and then
 * kept (an enumerable property, so spreads and comparisons see it). Returns `target`.
 */
export function withLazyPayload<T extends { payloadText: string }>(target: T): T & { payload: Record<string, unknown> } {
  Object.defineProperty(target, 'payload', LAZY_PAYLOAD);
  return target as T & { payload: Record<string, unknown> };
}

/**
 * A copy of `source` with `changes`, its payload still unparsed when it was: a spread
 * (`{ ...source }`) reads every property, the lazy `payload` included, and so parses it (and keeps
 * the parse on `source`). Own properties are copied as they are defined (an accessor stays one).
 */
export function copyKeepingPayloadLazy<T extends object>(source: T, changes: Partial<T>): T {
  return Object.assign(Object.defineProperties({}, Object.getOwnPropertyDescriptors(source)), changes) as T;
}

function parsePayloadOnce(this: { payloadText: string }): Record<string, unknown> {
  const payload = JSON.parse(this.payloadText) as Record<string, unknown>;
  Object.defineProperty(this, 'payload', { value: payload, enumerable: true, writable: true, configurable: true });
  return payload;
}

/**
 * One descriptor and one getter for every row: rows built alike then share their hidden class
 * (a getter made per row gives each row a class of its own — slower to build, and every function
 * that reads rows sees a new shape each time).
 */
const LAZY_PAYLOAD: PropertyDescriptor = { enumerable: true, configurable: true, get: parsePayloadOnce };
