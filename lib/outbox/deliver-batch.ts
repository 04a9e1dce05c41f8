/**
 * Delivery of one claimed batch: route every row, publish per destination in calls of at most
 * `maxBatchSize` entries (at most `outbox.concurrency` calls in flight across the pass), then
 * settle the whole batch in one statement per outcome kind.
 *
 * A call whose rows have all lost their claim (renewal changed no row) is aborted. A call that
 * still holds some rows runs to its end; only the rows still owned are settled. A row whose
 * topic matches no route is dead at once, in the same dead statement as the rest of the batch.
 */
import type { OutboxRow } from '../db/driver.ts';
import type { Destination, EntryOutcome, OutboundMessage } from '../destinations/destination.ts';
import type { PassContext } from './pass-context.ts';
import { SettlePlan, settleBatch } from './settle-batch.ts';

/** Delivers and settles `rows`; `signals` are the rows' lease-loss signals from the keeper. */
export async function deliverBatch(ctx: PassContext, rows: OutboxRow[], signals: ReadonlyMap<string, AbortSignal>): Promise<void> {
  const plan = new SettlePlan(ctx.retryBaseDelayMs, ctx.random);
  const byDestination = new Map<Destination, OutboxRow[]>();
  for (const row of rows) {
    const name = ctx.router(row.topic);
    const destination = name === undefined ? undefined : ctx.destinations.get(name);
    if (name === undefined) {
      plan.deadNow(row, `no route matches topic "${row.topic}" (outbox.routes)`);
    } else if (destination === undefined) {
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
      calls.push(ctx.limiter.run(() => publishChunk(ctx, destination, chunk, signals, plan)));
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

async function publishChunk(ctx: PassContext, destination: Destination, chunk: OutboxRow[], signals: ReadonlyMap<string, AbortSignal>, plan: SettlePlan): Promise<void> {
  const owned = chunk.filter((row) => !ctx.lost.has(row.id));
  if (owned.length === 0 || ctx.stopSignal.aborted) return;
  const call = callSignal(ctx.stopSignal, owned.map((row) => signals.get(row.id)).filter((s): s is AbortSignal => s !== undefined));
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
  const byId = new Map(outcomes.map((o) => [o.id, o]));
  const perOutcome = new Map<EntryOutcome['status'], number>();
  for (const row of owned) {
    const outcome = byId.get(row.id) ?? { id: row.id, status: 'retryable' as const, error: `destination ${destination.name} returned no outcome for this entry` };
    perOutcome.set(outcome.status, (perOutcome.get(outcome.status) ?? 0) + 1);
    plan.add(row, outcome);
  }
  // One metric update per outcome kind and call, not per row.
  for (const [outcome, n] of perOutcome) ctx.metrics.count('outboxDestinationMessages', n, { destination: destination.name, outcome });
}

/** A signal that aborts when the pass stops, or when every row of the call has lost its claim. */
function callSignal(stop: AbortSignal, rowSignals: AbortSignal[]): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const check = () => {
    if (stop.aborted) controller.abort(stop.reason);
    else if (rowSignals.length > 0 && rowSignals.every((s) => s.aborted)) controller.abort(rowSignals[0]!.reason);
  };
  check();
  for (const s of [stop, ...rowSignals]) s.addEventListener('abort', check);
  return {
    signal: controller.signal,
    dispose: () => {
      for (const s of [stop, ...rowSignals]) s.removeEventListener('abort', check);
    },
  };
}

function toOutbound(row: OutboxRow): OutboundMessage {
  return { id: row.id, topic: row.topic, key: row.key, payload: row.payload, headers: row.headers, attempt: row.attempt, replayCount: row.replayCount };
}
