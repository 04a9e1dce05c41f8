/**
 * Text of rows made safe to print to a terminal. Topics, keys, aggregate ids and errors come from
 * senders and destinations: an escape sequence in them could clear the operator's screen, set the
 * window title or print text that is not in the row. Every control character (C0, DEL, C1) and
 * every bidirectional formatting character is written as a visible `\uXXXX` escape; other text is
 * kept as it is.
 */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** `text` with each control or bidirectional formatting character written as `\uXXXX`. */
export function terminalText(text: string): string {
  return text.replace(UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
