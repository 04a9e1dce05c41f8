/**
 * A claimed row carries its payload as JSON text (`payloadText`, every digit kept); the parsed
 * `payload` is a view of it, parsed on first read. Delivery reads only the text, so the hot
 * path parses nothing; code that wants an object (a custom destination, a test) still gets one.
 */

/**
 * Defines `target.payload` as the parse of `target.payloadText`, computed on first read and then
 * kept (an enumerable property, so spreads and comparisons see it). Returns `target`.
 */
export function withLazyPayload<T extends { payloadText: string }>(target: T): T & { payload: Record<string, unknown> } {
  Object.defineProperty(target, 'payload', LAZY_PAYLOAD);
  return target as T & { payload: Record<string, unknown> };
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
