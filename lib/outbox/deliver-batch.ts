/**
 * Delivery of one claimed batch: route every row, publish per destination in calls of at most
 * `maxBatchSize` entries (at most `outbox.concurrency` calls in flight across the pass), then
 * settle the whole batch in one statement per outcome kind.
 *
 * A call whose rows have all lost their claim (renewal changed no row) is aborted. A call that
 * still holds some rows runs to its end; only the rows still owned are settled. When the pass
 * stops waiting with a call still open, the rows whose calls answered are settled all the same;
 * the open call's rows stay `processing` for their lease to end. A row whose
 * topic matches no route is dead at once, in the same dead statement as the rest of the batch.
 *
 * Per-row work is kept to what each row needs: the lease keeper watches each call's rows as one
 * group (`watchMany`) with a callback into the call's `CallClaims`, and each call (up to
 * `maxBatchSize` rows) has one `AbortController`, not one per row. Watching row by row cost the
 * pass three times its other CPU per message (a map entry and two objects per row, kept alive
 * across the publish, so promoted to the old generation).
 */
import { claimKey } from '../claims/claim-key.ts';
import type { ClaimRef, OutboxRow } from '../db/driver.ts';
import type { Destination, EntryOutcome, OutboundMessage } from '../destinations/destination.ts';
import type { AbortableCall, OpenCalls } from './open-calls.ts';
import type { PassContext } from './pass-context.ts';
import { NO_ROUTE } from './failure-report.ts';
import { SettlePlan, settleBatch } from './settle-batch.ts';
import type { TraceContext } from '../observability/trace-context.ts';

/** The rows of one destination call that still hold their claim, and the call's abort. */
class CallClaims implements AbortableCall {
  #live: number;
  #controller: AbortController | undefined;
  slot = -1;
  /** True once the call was opened (its rows offered to the destination). */
  opened = false;

  constructor(rows: number) {
    this.#live = rows;
  }

  /** A row of the call lost its claim; the last one aborts the call. */
  rowLost(): void {
    this.#live--;
    if (this.#live === 0) this.abort(new Error('claim lost: every row of this call lost its claim at renewal'));
  }

  abort(reason: unknown): void {
    this.#controller?.abort(reason);
  }

  /** The call's signal: aborts when the pass stops (`calls.abortAll`) or when every row of the call is lost. */
  open(calls: OpenCalls): { signal: AbortSignal; dispose(): void } {
    const controller = new AbortController();
    this.#controller = controller;
    this.opened = true;
    calls.add(this);
    return {
      signal: controller.signal,
      dispose: () => {
        calls.remove(this);
        this.#controller = undefined;
      },
    };
  }
}

const ignoreLoss = () => {};
const claimOf = (row: OutboxRow): ClaimRef => ({ id: row.id, token: row.claimToken });

/** Delivers and settles `rows`, watching their claims with the pass's lease keeper meanwhile. */
export async function deliverBatch(ctx: PassContext, rows: OutboxRow[]): Promise<void> {
  const plan = new SettlePlan(ctx.retryBaseDelayMs, ctx.random);
  const byDestination = new Map<Destination, OutboxRow[]>();
  const unroutable: OutboxRow[] = [];
  for (const row of rows) {
    const name = ctx.router(row.topic);
    const destination = name === undefined ? undefined : ctx.destinations.get(name);
    if (name === undefined) {
      unroutable.push(row);
      plan.deadNow(row, `no route matches topic "${row.topic}" (outbox.routes)`, { destinationName: NO_ROUTE, errorClass: 'NoRoute' });
    } else if (destination === undefined) {
      unroutable.push(row);
      plan.deadNow(row, `route for topic "${row.topic}" names destination "${name}", which is not configured`, { destinationName: name, errorClass: 'UnknownDestination' });
    } else {
      const list = byDestination.get(destination) ?? [];
      list.push(row);
      byDestination.set(destination, list);
    }
  }
  // One watch per destination call (and one for the unroutable rows), not one per row.
  const watched = unroutable.length > 0 ? [ctx.keeper.watchMany(unroutable, claimOf, ignoreLoss)] : [];
  const calls: Array<Promise<void>> = [];
  const chunks: Array<{ rows: OutboxRow[]; claims: CallClaims }> = [];
  for (const [destination, list] of byDestination) {
    for (let i = 0; i < list.length; i += destination.maxBatchSize) {
      const chunk = list.slice(i, i + destination.maxBatchSize);
      const claims = new CallClaims(chunk.length);
      chunks.push({ rows: chunk, claims });
      watched.push(ctx.keeper.watchMany(chunk, claimOf, () => claims.rowLost()));
      calls.push(ctx.limiter.run(() => publishChunk(ctx, destination, chunk, claims, plan)));
    }
  }
  // Settles the plan once, whoever comes first: this batch when its calls are done, or the pass
  // when it stops waiting (then only the rows whose calls answered are in the plan: a call that
  // answers after the pass closed adds nothing).
  let settling: Promise<void> | undefined;
  const settle = (): Promise<void> => {
    if (settling === undefined) {
      // Rows whose call never opened (the pass stopped first) were not offered to any destination:
      // released, no attempt spent; left to their lease, the reclaim would charge them one.
      const unstarted = ctx.closed()
        ? chunks.filter((c) => !c.claims.opened).flatMap((c) => c.rows.map(claimOf)).filter((c) => !ctx.lost.has(claimKey(c)))
        : [];
      const sent = settleBatch(ctx, plan.without(ctx.lost), unstarted);
      ctx.settling.add(sent);
      settling = sent.finally(() => ctx.settling.delete(sent));
    }
    return settling;
  };
  ctx.unfinished.add(settle);
  try {
    try {
      await Promise.all(calls);
    } finally {
      // Released before the settle: a renewal racing the settle would otherwise see a finished row
      // and report a lost claim. The settle is fenced on its own.
      for (const handle of watched) ctx.keeper.releaseMany(handle);
    }
    // A renewal sent before the release still carries these rows: the settle waits for it, since
    // the two statements lock the rows in different orders and could deadlock.
    await ctx.keeper.idle();
    if (ctx.closed()) return; // the pass settles what answered (it took `settle` when it closed)
    await settle();
  } finally {
    ctx.unfinished.delete(settle);
  }
}

async function publishChunk(ctx: PassContext, destination: Destination, chunk: OutboxRow[], claims: CallClaims, plan: SettlePlan): Promise<void> {
  const owned = ctx.lost.size === 0 ? chunk : chunk.filter((row) => !ctx.lost.has(claimKey(claimOf(row))));
  if (owned.length === 0 || ctx.calls.stopped) return;
  const call = claims.open(ctx.calls);
  const started = performance.now();
  let outcomes: EntryOutcome[];
  try {
    outcomes = await destination.publishBatch(owned.map(toOutbound), call.signal);
  } catch (error) {
    const reason = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    const errorClass = error instanceof Error ? error.name : 'Error';
    outcomes = owned.map((row) => ({ id: row.id, status: 'retryable', error: `the call threw ${reason}`, errorClass }));
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
    const outcome = (inOrder ? outcomes[i] : byId!.get(row.id)) ?? { id: row.id, status: 'retryable' as const, error: 'returned no outcome for this entry', errorClass: 'NoOutcome' };
    perOutcome.set(outcome.status, (perOutcome.get(outcome.status) ?? 0) + 1);
    plan.add(row, outcome, destination);
  }
  // One metric update per outcome kind and call, not per row.
  for (const [outcome, n] of perOutcome) ctx.metrics.count('outboxDestinationMessages', n, { destination: destination.name, outcome });
}

/**
 * A claimed row as a destination sees it. The payload text travels; `payload` is the row's parsed
 * view, read through (parsed only if a destination reads it), so building one costs no parse.
 */
class Outbound implements OutboundMessage {
  readonly id: string;
  readonly topic: string;
  readonly key: string | null;
  readonly payloadText: string;
  readonly headers: Record<string, string>;
  readonly attempt: number;
  readonly replayCount: number;
  readonly trace: TraceContext | null;
  readonly #row: OutboxRow;

  constructor(row: OutboxRow) {
    this.id = row.id;
    this.topic = row.topic;
    this.key = row.key;
    this.payloadText = row.payloadText;
    this.headers = row.headers;
    this.attempt = row.attempt;
    this.replayCount = row.replayCount;
    this.trace = row.trace ?? null;
    this.#row = row;
  }

  get payload(): Record<string, unknown> {
    return this.#row.payload;
  }
}

function toOutbound(row: OutboxRow): OutboundMessage {
  return new Outbound(row);
}
