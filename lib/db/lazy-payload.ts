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
  Object.defineProperty(target, 'payload', {
    enumerable: true,
    configurable: true,
    get(this: T) {
      const payload = JSON.parse(this.payloadText) as Record<string, unknown>;
      Object.defineProperty(this, 'payload', { value: payload, enumerable: true, writable: true, configurable: true });
      return payload;
    },
  });
  return target as T & { payload: Record<string, unknown> };
}
