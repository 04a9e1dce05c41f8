/**
 * A list whose items know their index (`slot`), so removing one is O(1): the last item moves into
 * its place. The outbox pass keeps its short-lived registrations (watched claims, open destination
 * calls) in such arrays rather than in a `Set` or `Map`: a long-lived `Set`/`Map` that keeps taking
 * and dropping entries pointing at young objects made the pass spend most of its CPU in the
 * garbage collector (see LeaseKeeper).
 */

/** An item of a slot list: `slot` is its index while listed, -1 otherwise. */
export interface Slotted {
  slot: number;
}

/** Appends `item` (not already listed). */
export function addToSlots<T extends Slotted>(list: T[], item: T): void {
  item.slot = list.length;
  list.push(item);
}

/** Removes `item`; false when it was not listed. */
export function removeFromSlots<T extends Slotted>(list: T[], item: T): boolean {
  if (item.slot === -1) return false;
  const last = list.pop()!;
  if (last !== item) {
    last.slot = item.slot;
    list[item.slot] = last;
  }
  item.slot = -1;
  return true;
}
