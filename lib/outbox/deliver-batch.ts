/**
 * Delivery of one claimed batch: route every row, publish per destination in calls of at most
 * `maxBatchSize` entries (at most `outbox.concurrency` calls in flight across the pass), then
 * settle the whole batch in one statement per outcome kind.
 *
 * A call whose rows have all lost their claim (renewal changed no row) is aborted. A call that
 * still holds some rows runs to its end; only the rows still owned are settled. A row whose
 * topic matches no route is dead at once, in the same dead statement as the rest of the batch.
 *
 * Per-row work is kept to what each row needs: the lease keeper watches each row with a callback
 * into its call's `CallClaims`, and each call (up to `maxBatchSize` rows) has one
 * `AbortController`, not one per row.
 */
import type { OutboxRow } from '../db/driver.ts';
import type { Destination, EntryOutcome, OutboundMessage } from '../destinations/destination.ts';
import type { PassContext } from './pass-context.ts';
import { SettlePlan, settleBatch } from './settle-batch.ts';

/** The rows of one destination call that still hold their claim, and the call's abort. */
class CallClaims {
  #live: number;
  #controller: AbortController | undefined;

  constructor(rows: number) {
    this.#live = rows;
  }

  /** A row of the call lost its claim; the last one aborts the call. */
  rowLost(): void {
    this.#live--;
    if (this.#live === 0) this.#controller?.abort(new Error('claim lost: every row of this call lost its claim at renewal'));
  }

  /** The call's signal: aborts when the pass stops or when every row of the call is lost. */
  open(stop: AbortSignal): { signal: AbortSignal; dispose(): void } {
    const controller = new AbortController();
    this.#controller = controller;
    const onStop = () => controller.abort(stop.reason);
    if (stop.aborted) onStop();
    else stop.addEventListener('abort', onStop, { once: true });
    return {
      signal: controller.signal,
      dispose: () => {
        stop.removeEventListener('abort', onStop);
        this.#controller = undefined;
      },
    };
  }
}

const ignoreLoss = () => {};

/** Delivers and settles `rows`, watching their claims with the pass's lease keeper meanwhile. */
export async function deliverBatch(ctx: PassContext, rows: OutboxRow[]): Promise<void> {
  const plan = new SettlePlan(ctx.retryBaseDelayMs, ctx.random);
  const byDestination = new Map<Destination, OutboxRow[]>();
  for (const row of rows) {
    const name = ctx.router(row.topic);
    const destination = name === undefined ? undefined : ctx.destinations.get(name);
    if (name === undefined) {
      ctx.keeper.watch({ id: row.id, token: row.claimToken }, ignoreLoss);
      plan.deadNow(row, `no route matches topic "${row.topic}" (outbox.routes)`);
    } else if (destination === undefined) {
      ctx.keeper.watch({ id: row.id, token: row.claimToken }, ignoreLoss);
      plan.deadNow(row, `route for topic "${row.topic}" names destination "${name}", which is not configured`);
    } else {
      const list = byDestination.get(destination) ?? [];
      list.push(row);
      byDestination.set(destination, list);
    }
  }
  const calls: Array<Promise<void>> = [];
  for (const [destination, list] of byDestination) {
    for (let i = 0; i < list.length; i += destination.maxBatchSize) {
      const chunk = list.slice(i, i + destination.maxBatchSize);
      const claims = new CallClaims(chunk.length);
      const lost = () => claims.rowLost();
      for (const row of chunk) ctx.keeper.watch({ id: row.id, token: row.claimToken }, lost);
      calls.push(ctx.limiter.run(() => publishChunk(ctx, destination, chunk, claims, plan)));
    }
  }
  try {
    await Promise.all(calls);
  } finally {
    // Released before the settle: a renewal racing the settle would otherwise see a finished row
    // and report a lost claim. The settle is fenced on its own.
    for (const row of rows) ctx.keeper.release(row.id);
  }
  if (ctx.closed()) return;
  await settleBatch(ctx, plan.without(ctx.lost));
}

async function publishChunk(ctx: PassContext, destination: Destination, chunk: OutboxRow[], claims: CallClaims, plan: SettlePlan): Promise<void> {
  const owned = ctx.lost.size === 0 ? chunk : chunk.filter((row) => !ctx.lost.has(row.id));
  if (owned.length === 0 || ctx.stopSignal.aborted) return;
  const call = claims.open(ctx.stopSignal);
  const started = performance.now();
  let outcomes: EntryOutcome[];
  try {
    outcomes = await destination.publishBatch(owned.map(toOutbound), call.signal);
  } catch (error) {
    const reason = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    outcomes = owned.map((row) => ({ id: row.id, status: 'retryable', error: `destination call failed: ${reason}` }));
  } finally {
    call.dispose();
  }
  if (ctx.closed()) return; // abandoned by a pass that stopped waiting: nothing is counted or settled
  ctx.tally.publishCalls++;
  ctx.publishTimed(destination.type, performance.now() - started);
  // Destinations answer in entry order; look ids up only when they do not.
  const inOrder = outcomes.length === owned.length && outcomes.every((o, i) => o.id === owned[i]!.id);
  const byId = inOrder ? undefined : new Map(outcomes.map((o) => [o.id, o]));
  const perOutcome = new Map<EntryOutcome['status'], number>();
  for (let i = 0; i < owned.length; i++) {
    const row = owned[i]!;
    const outcome = (inOrder ? outcomes[i] : byId!.get(row.id)) ?? { id: row.id, status: 'retryable' as const, error: `destination ${destination.name} returned no outcome for this entry` };
    perOutcome.set(outcome.status, (perOutcome.get(outcome.status) ?? 0) + 1);
    plan.add(row, outcome);
  }
  // One metric update per outcome kind and call, not per row.
  for (const [outcome, n] of perOutcome) ctx.metrics.count('outboxDestinationMessages', n, { destination: destination.name, outcome });
}

function toOutbound(row: OutboxRow): OutboundMessage {
  return { id: row.id, topic: row.topic, key: row.key, payload: row.payload, headers: row.headers, attempt: row.attempt, replayCount: row.replayCount };
}
