/**
 * The destination calls in flight in one outbox pass, so that stopping the pass aborts them all.
 *
 * Kept in a slot list (`lib/runtime/slot-list.ts`) rather than as one `abort` listener per call
 * on a pass-wide `AbortSignal`: a long-lived collection (an `EventTarget`'s listener map, a `Set`, a `Map`)
 * that keeps taking and dropping short-lived entries made the pass spend most of its CPU in the
 * garbage collector (see `LeaseKeeper`).
 */
import { addToSlots, removeFromSlots, type Slotted } from '../runtime/slot-list.ts';

/** One call's abort, with the reason the pass stopped or a loss. `slot` is owned by `OpenCalls`. */
export interface AbortableCall extends Slotted {
  abort(reason: unknown): void;
}

export class OpenCalls {
  readonly #open: AbortableCall[] = [];
  #stopped = false;
  #reason: unknown;

  /** True once `abortAll` ran: no new call should start. */
  get stopped(): boolean {
    return this.#stopped;
  }

  /** Registers a call; a call opened after the stop is aborted at once. */
  add(call: AbortableCall): void {
    if (this.#stopped) {
      call.slot = -1;
      call.abort(this.#reason);
      return;
    }
    addToSlots(this.#open, call);
  }

  /** Unregisters a call (it finished); harmless when it was not registered. */
  remove(call: AbortableCall): void {
    removeFromSlots(this.#open, call);
  }

  /** Aborts every open call with `reason`, and every call opened later. */
  abortAll(reason: unknown): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#reason = reason;
    const open = this.#open.splice(0);
    for (const call of open) {
      call.slot = -1;
      call.abort(reason);
    }
  }

  /** Calls open now. */
  get size(): number {
    return this.#open.length;
  }
}
