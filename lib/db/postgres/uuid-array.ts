/**
 * A `uuid[]` bind value in PostgreSQL's binary array format, for the id and token arrays of the
 * fenced batch writes. `pg` sends a `Buffer` bind value in binary format, so the server reads the
 * array with `array_recv` (16 bytes per element) instead of parsing an array literal, and the
 * statement carries 20 bytes per uuid instead of 39 characters: the sent mark of a 1,000-row batch
 * writes 40 KB instead of 78 KB, and `pg` escapes and quotes no element. Measured in
 * docs/performance-history.md ("Since this run: the sent mark's arrays in binary").
 *
 * Only ids in the 36-character form (`8-4-4-4-12` hexadecimal digits, either case: what every id
 * and token read from the database is) are encoded; for anything else the ids go as they are, in
 * text, and PostgreSQL answers an id it cannot read with its usual error; so do the arrays of a
 * pool or client on `pg`'s native client, which sends every bind value as text.
 */
import pg from 'pg';
import { isPgPool } from './pg-pool.ts';

/** `pg_type.oid` of `uuid`: `array_recv` refuses an array whose element type is any other. */
const UUID_OID = 2950;

/** The value of each hexadecimal digit by character code (-1: not a digit). */
const HEX_VALUE = new Int8Array(128).fill(-1);
for (let i = 0; i < 10; i++) HEX_VALUE[48 + i] = i;
for (let i = 0; i < 6; i++) {
  HEX_VALUE[65 + i] = 10 + i;
  HEX_VALUE[97 + i] = 10 + i;
}

const hexValue = (code: number): number => (code < 128 ? HEX_VALUE[code]! : -1);

/** `ids` as a binary `uuid[]` (a one-dimensional array, lower bound 1), or `undefined` when one of them is not in the 36-character form. */
export function binaryUuidArray(ids: readonly unknown[]): Buffer | undefined {
  const n = ids.length;
  if (n === 0) {
    // No dimensions: the empty array.
    const empty = Buffer.alloc(12);
    empty.writeInt32BE(UUID_OID, 8);
    return empty;
  }
  const out = Buffer.allocUnsafe(20 + 20 * n);
  out.writeInt32BE(1, 0); // dimensions
  out.writeInt32BE(0, 4); // no NULL element
  out.writeInt32BE(UUID_OID, 8);
  out.writeInt32BE(n, 12); // elements
  out.writeInt32BE(1, 16); // lower bound
  let at = 20;
  for (const id of ids) {
    if (typeof id !== 'string' || id.length !== 36) return undefined;
    out.writeInt32BE(16, at);
    at += 4;
    for (let i = 0; i < 36; ) {
      if (i === 8 || i === 13 || i === 18 || i === 23) {
        if (id.charCodeAt(i) !== 45) return undefined;
        i++;
        continue;
      }
      const high = hexValue(id.charCodeAt(i));
      const low = hexValue(id.charCodeAt(i + 1));
      if (high < 0 || low < 0) return undefined;
      out[at++] = (high << 4) | low;
      i += 2;
    }
  }
  return out;
}

/**
 * `pg`'s JavaScript client class, the one that sends a `Buffer` bind value in binary format; none
 * when `pg` was loaded with `NODE_PG_FORCE_NATIVE` (the variable `pg` itself reads as it loads):
 * its `Client` is then the native one (libpq through `pg-native`), which sends every bind value as
 * text, a `Buffer` as an empty string.
 */
const JS_CLIENT: typeof pg.Client | undefined = (() => {
  try {
    return process.env.NODE_PG_FORCE_NATIVE ? undefined : pg.Client;
  } catch {
    return pg.Client;
  }
})();

/**
 * Whether `C` is `pg`'s JavaScript client class, of QueueBox's copy of `pg` or of another (an
 * application's own `pg` version: npm nests QueueBox's), or a class that extends one: its query
 * class (`Client.Query`) writes the statement's messages itself (`prepare`, `hasBeenParsed`), and
 * every `pg` 8 copy's JavaScript client binds a `Buffer` in binary format. The native client's
 * query class (`pg-native`) has neither.
 */
function isJsClientClass(C: unknown): boolean {
  if (typeof C !== 'function') return false;
  if (C === JS_CLIENT || (JS_CLIENT !== undefined && C.prototype instanceof JS_CLIENT)) return true;
  const query = (C as { Query?: { prototype?: Record<string, unknown> } }).Query?.prototype;
  return typeof query?.prepare === 'function' && typeof query.hasBeenParsed === 'function';
}

/** Whether `db` runs its statements on `pg`'s JavaScript client (of any copy of `pg`): a pool whose `Client` is it (or extends it), or such a client. */
function sendsBinary(db: unknown): boolean {
  if (JS_CLIENT === undefined) return false;
  if (isPgPool(db)) {
    // `pg-pool` keeps the client class it creates connections with; a caller's pool may name another (`Client: pg.native.Client`).
    return isJsClientClass((db as { Client?: unknown }).Client);
  }
  return typeof db === 'object' && db !== null && isJsClientClass(db.constructor);
}

/**
 * The bind value of a `uuid[]` parameter sent through `db`: binary when `db` runs on `pg`'s
 * JavaScript client (a pool or a client) and every id is in the 36-character form; else `ids` as
 * they are (text: through the native client or any other executor).
 */
export function uuidArrayParam(db: unknown, ids: readonly string[]): Buffer | readonly string[] {
  if (!sendsBinary(db)) return ids;
  return binaryUuidArray(ids) ?? ids;
}

/** The ids and the tokens of a fenced write's claims, as its two `uuid[]` bind values (`uuidArrayParam`; `db` is asked once). */
export function claimArrayParams(db: unknown, ids: readonly string[], tokens: readonly string[]): [Buffer | readonly string[], Buffer | readonly string[]] {
  if (!sendsBinary(db)) return [ids, tokens];
  return [binaryUuidArray(ids) ?? ids, binaryUuidArray(tokens) ?? tokens];
}
