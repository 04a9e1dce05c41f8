/**
 * The previews a replay confirm may act on, each usable once.
 *
 * A preview with actions allowed remembers its table, the ids it listed and their states under a random
 * confirmation id; the confirm form carries that id. A confirm moves only those of the rows that
 * have not changed since (a row replayed elsewhere and dead again is left alone), is refused
 * when it names rows the preview did not list, and a second confirm of the same preview (a
 * resubmitted form, a double click) is refused instead of replaying rows again — rows replayed
 * from `sent` would otherwise be delivered twice.
 */
import { randomBytes } from 'node:crypto';

/** What one preview listed. */
export interface PreviewedReplay {
  /** The table of the listed rows. */
  table: 'outbox' | 'inbox';
  ids: string[];
  states: Array<'sent' | 'dead'>;
  /** Each listed row's `updated_at` (ms) as previewed: a row changed since is not replayed. */
  updatedAt: Record<string, number>;
}

/** Previews kept at most (the oldest is forgotten first) and for how long. */
export const CONFIRMATION_LIMITS = { max: 1000, ttlMs: 30 * 60_000 } as const;

/** One console's open replay previews. */
export class ReplayConfirmations {
  /** Hidden field name of the confirmation id. */
  static readonly FIELD = 'confirm';
  readonly #open = new Map<string, PreviewedReplay & { expiresAt: number; owner: string }>();
  readonly #now: () => number;

  /** `now` is injectable for tests. */
  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /**
   * Remembers a preview; returns its confirmation id. `owner` names the browser session that
   * previewed (its form token): only a confirm from that session takes it, so an id seen by
   * another session (a shared screen, a copied page) moves nothing from there.
   */
  issue(preview: PreviewedReplay, owner = ''): string {
    const id = randomBytes(16).toString('hex');
    this.#open.set(id, { table: preview.table, ids: [...preview.ids], states: [...preview.states], updatedAt: { ...preview.updatedAt }, expiresAt: this.#now() + CONFIRMATION_LIMITS.ttlMs, owner });
    while (this.#open.size > CONFIRMATION_LIMITS.max) this.#open.delete(this.#open.keys().next().value!);
    return id;
  }

  /** Takes (and forgets) a preview; undefined when unknown, already confirmed, expired or another session's (which keeps it). */
  take(id: string, owner = ''): PreviewedReplay | undefined {
    const entry = this.#open.get(id);
    if (!entry || entry.owner !== owner) return undefined;
    this.#open.delete(id);
    if (entry.expiresAt < this.#now()) return undefined;
    return { table: entry.table, ids: entry.ids, states: entry.states, updatedAt: entry.updatedAt };
  }
}
