/**
 * A read made at most once per interval across every caller, through a gate row of the
 * maintenance table (both dialects open and give back the turn in their own SQL).
 */

/**
 * `read()` when `takeTurn()` gave this caller the gate's turn; `undefined` when another caller's
 * turn is not over. A read that fails gives its turn back (`giveBack`): it read nothing, so the
 * next caller reads instead of waiting out the interval. The failure is what the caller hears,
 * also when the give-back fails too (or cannot be sent: a read that failed because the
 * invocation's time ran out leaves the turn taken).
 */
export async function readInTurn<Turn, T>(takeTurn: () => Promise<Turn | undefined>, giveBack: (turn: Turn) => Promise<unknown>, read: () => Promise<T>): Promise<T | undefined> {
  const turn = await takeTurn();
  if (turn === undefined) return undefined;
  try {
    return await read();
  } catch (error) {
    await giveBack(turn).catch(() => undefined);
    throw error;
  }
}
