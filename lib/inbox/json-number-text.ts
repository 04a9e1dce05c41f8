/**
 * A JSON number kept as the sender wrote it, for numbers that a JavaScript `number` would change
 * (beyond 2^53, `1.0`, `1e3`…): ids extracted from it are the sender's digits, never a rounding.
 */

/** A number token of a message body; `text` is the token exactly as sent. */
export class JsonNumberText {
  // Private: JSONPath's recursive descent (`$..`) must not see the token as a property.
  readonly #text: string;
  constructor(text: string) {
    this.#text = text;
  }
  /** The token as sent. */
  get text(): string {
    return this.#text;
  }
  /** The nearest JavaScript number (JSONPath filter comparisons). */
  valueOf(): number {
    return Number(this.#text);
  }
  toString(): string {
    return this.#text;
  }
  toJSON(): number {
    return Number(this.#text);
  }
}
