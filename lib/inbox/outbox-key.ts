/**
 * The outbox key of a relayed inbox row (`inbox.relay.outboxKey`).
 *
 * The outbox orders rows by key: one row of a key in flight, a row waiting for a retry holds its
 * key. The relay's key must therefore belong to the same unit as the inbox's order, the
 * aggregate of one source; with the aggregate id alone, one source's failing row would hold
 * another source's rows of the same aggregate id in the outbox.
 *
 * - `source-and-aggregate` (default): `<source>:<aggregateId>`. A source name has no `:`
 *   (`[a-z0-9_-]`), so the first `:` ends it and no two (source, aggregate) pairs share a key.
 *   When that is longer than 128 characters (SQS's longest FIFO `MessageGroupId`), the key is
 *   `<source>#<SHA-256 of the aggregate id, 64 hex digits>` (at most 128 characters): `#` never
 *   follows the source in the first form, so the two forms cannot meet either. A relayed key is
 *   thus at most 128 characters, within the outbox's 255 and a FIFO group id's 128.
 * - `aggregate`: the aggregate id, as before (`MessageGroupId` = aggregate id).
 *
 * Rows without aggregate (NULL or `''`) get no key in both.
 */
import { createHash } from 'node:crypto';

export type RelayOutboxKeyMode = 'source-and-aggregate' | 'aggregate';

/** Longest scoped key written as text; a longer one becomes the digest form. */
export const SCOPED_KEY_MAX_LENGTH = 128;

/** The outbox key of a row of `source` with `aggregateId` under `mode`; null without aggregate. */
export function relayOutboxKey(source: string, aggregateId: string | null, mode: RelayOutboxKeyMode): string | null {
  if (aggregateId === null || aggregateId === '') return null;
  if (mode === 'aggregate') return aggregateId;
  const scoped = `${source}:${aggregateId}`;
  if (scoped.length <= SCOPED_KEY_MAX_LENGTH) return scoped;
  return `${source}#${createHash('sha256').update(aggregateId, 'utf8').digest('hex')}`;
}

/** The key the same row would get under the other mode: the key its aggregate's earlier rows may still hold in the outbox. */
export function otherRelayOutboxKey(source: string, aggregateId: string | null, mode: RelayOutboxKeyMode): string | null {
  return relayOutboxKey(source, aggregateId, mode === 'aggregate' ? 'source-and-aggregate' : 'aggregate');
}
