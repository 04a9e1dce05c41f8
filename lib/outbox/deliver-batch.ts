/**
 * Delivery of one claimed batch: route every row, publish per destination in calls of at most
 * `maxBatchSize` entries (at most `outbox.concurrency` calls in flight across the pass), then
 * settle the whole batch in one statement per outcome kind.
 *
 * A call whose rows have all lost their claim (renewal changed no row) is aborted. A call that
 * still holds some rows runs to its end; only the rows still owned are settled. When the pass
 * stops waiting with a call still open, the rows whose calls answered are settled all the same
 * (also those of the service calls that answered when the destination split a call by size), the
 * rows never offered are released, and the open call's rows stay `processing` for their lease to
 * end. A row whose
 * topic matches no route is dead at once, in the same dead statement as the rest of the batch.
 *
 * A settle whose writes were not sent because the invocation had no time left (a pass frozen or
 * held past the invocation's end: `settleBatch`) did nothing: its rows stay `processing` for the
 * reclaim, and the batch reports them to the pass (`NotSent`) instead of failing it.
 *
 * Per-row work is kept to what each row needs: the lease keeper watches each call's rows as one
 * group (`watchMany`) with a callback into the call's `CallClaims`, and each call (up to
 * `maxBatchSize` rows) has one `AbortController`, not one per row. Watching row by row cost the
 * pass three times its other CPU per message (a map entry and two objects per row, kept alive
 * across the publish, so promoted to the old generation).
 */
import { claimKey } from '../claims/claim-key.ts';
import type { ClaimRef, OutboxRow } from '../db/driver.ts';
import type { CallProgress, Destination, EntryOutcome, OutboundMessage } from '../destinations/destination.ts';
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
  /** True once the call was opened (its rows handed to the destination). */
  opened = false;
  /** What the destination told of the call as it went, when it split it into several service calls. */
  progress: ChunkProgress | undefined;

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

  /**
   * Whether `row` may have reached the destination: its call was opened and, when the destination
   * split the call into several service calls, the one holding `row` was sent (or `row` was
   * answered without one).
   */
  offered(row: OutboxRow): boolean {
    return this.opened && this.progress?.untouched?.has(row.id) !== true;
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

/**
 * Told of the rows of a settle whose finishing writes were not sent because the invocation had no
 * time left (`settleBatch`'s `OutOfTime`): `rows` of them, `delivered` of which the destination had accepted
 * (their sent mark was not sent: they are delivered again after their lease).
 */
export type NotSent = (rows: number, delivered: number) => void;

/**
 * Delivers and settles `rows` (claim order: `sequence`), watching their claims with the pass's
 * lease keeper meanwhile. A batch holding several rows of a key (`outbox.rowsPerKey`) is delivered
 * in rounds (`deliverPipelined`); any other batch at once. Rows whose settle was not sent for lack
 * of time are reported to `notSent`; the batch then resolves.
 */
export async function deliverBatch(ctx: PassContext, rows: OutboxRow[], notSent: NotSent): Promise<void> {
  const lanes = keyLanes(rows);
  return lanes === undefined ? deliverAtOnce(ctx, rows, notSent) : deliverPipelined(ctx, lanes, rows, notSent);
}

/**
 * The rows of each key in `sequence` order, one lane per key (a keyless row is a lane of its
 * own); undefined when no key has two rows in the batch. The lanes are built only then: a batch
 * of keyless rows or of distinct keys allocates no lane per row.
 */
function keyLanes(rows: OutboxRow[]): OutboxRow[][] | undefined {
  const keys = new Set<string>();
  let several = false;
  for (const row of rows) {
    if (row.key === null || row.key === '') continue;
    if (keys.has(row.key)) {
      several = true;
      break;
    }
    keys.add(row.key);
  }
  if (!several) return undefined;
  const byKey = new Map<string, OutboxRow[]>();
  const lanes: OutboxRow[][] = [];
  for (const row of rows) {
    if (row.key === null || row.key === '') {
      lanes.push([row]);
      continue;
    }
    const lane = byKey.get(row.key);
    if (lane === undefined) {
      const created = [row];
      byKey.set(row.key, created);
      lanes.push(created);
    } else {
      lane.push(row);
    }
  }
  return lanes;
}

/** Delivers a batch that holds at most one row of each key: every call at once. */
async function deliverAtOnce(ctx: PassContext, rows: OutboxRow[], notSent: NotSent): Promise<void> {
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
      // Rows never offered to a destination (their call never opened because the pass stopped
      // first, or a later service call of a split one never went out) are released, no attempt
      // spent; left to their lease, the reclaim would charge them one.
      const unstarted = ctx.closed()
        ? chunks.flatMap((c) => c.rows.filter((row) => !c.claims.offered(row)).map(claimOf)).filter((c) => !ctx.lost.has(claimKey(c)))
        : [];
      const sent = settleInTime(ctx, plan.without(ctx.lost), unstarted, false, notSent);
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

/**
 * Delivers a batch that holds several rows of some keys (`outbox.rowsPerKey`), in rounds: round
 * `i` offers the `i`-th row of every key still moving (and, in the first, every keyless row), so a
 * destination call never carries two rows of one key, and a key's next row is offered only after
 * the call of its previous row answered `sent` — no row is published before every earlier row of
 * its key in the claim. At a key's first row that is not sent (retry, dead, a call that threw or
 * was aborted, a claim lost at renewal) the rest of the key's rows are released: back to
 * `pending`, unpublished, no attempt spent; the failed row follows the retry or dead path. The
 * rows of keys whose next round would start past the claim window are released the same way
 * (`ctx.callFitsBeforeDeadline`). The
 * settle then writes the releases first and the sent rows last (`ordered`), so the first row of a
 * key in the claim (`key_first`, the one the in-flight index holds) leaves `processing` after
 * the rest of its key: the key has one holder until the claim lets go of all its rows.
 *
 * Every row is watched from the start (one group), and a loss reaches the call its row is in.
 */
async function deliverPipelined(ctx: PassContext, lanes: OutboxRow[][], rows: OutboxRow[], notSent: NotSent): Promise<void> {
  const plan = new SettlePlan(ctx.retryBaseDelayMs, ctx.random);
  const sent = new Set<string>();
  const inCall = new Map<string, CallClaims>();
  const chunks: Array<{ rows: OutboxRow[]; claims: CallClaims }> = [];
  const released: ClaimRef[] = [];
  const watched = ctx.keeper.watchMany(rows, claimOf, (row) => inCall.get(row.id)?.rowLost());
  let settling: Promise<void> | undefined;
  const settle = (): Promise<void> => {
    if (settling === undefined) {
      // Closed: every row not offered to a destination (its call never opened, or its round
      // never came) and not settled by the plan goes back unpublished.
      let unstarted = released;
      if (ctx.closed()) {
        const done = new Set<string>([...plan.sent, ...plan.retry, ...plan.dead].map((c) => c.id));
        for (const chunk of chunks) for (const row of chunk.rows) if (chunk.claims.offered(row)) done.add(row.id);
        unstarted = rows.filter((row) => !done.has(row.id)).map(claimOf);
      }
      const sending = settleInTime(ctx, plan.without(ctx.lost), unstarted.filter((c) => !ctx.lost.has(claimKey(c))), true, notSent);
      ctx.settling.add(sending);
      settling = sending.finally(() => ctx.settling.delete(sending));
    }
    return settling;
  };
  ctx.unfinished.add(settle);
  try {
    try {
      let round = lanes.map((lane) => ({ lane, at: 0 }));
      let first = true;
      while (round.length > 0 && !ctx.closed() && !ctx.calls.stopped) {
        // A key's next row goes out only on a claim known to be held: a worker thawed after its
        // lease ended learns it here (the renewal finds the claims lost, and their rows are not
        // offered) rather than after offering more rows of keys another claim now holds.
        if (!first) await ctx.keeper.confirm(watched);
        first = false;
        if (ctx.closed() || ctx.calls.stopped) break;
        await publishRound(ctx, round.map((c) => c.lane[c.at]!), plan, { sent, inCall, chunks });
        const next: typeof round = [];
        for (const cursor of round) {
          const row = cursor.lane[cursor.at]!;
          if (cursor.at + 1 >= cursor.lane.length) continue;
          if (sent.has(row.id) && !ctx.lost.has(claimKey(claimOf(row)))) {
            cursor.at++;
            next.push(cursor);
          } else {
            released.push(...cursor.lane.slice(cursor.at + 1).map(claimOf));
          }
        }
        round = next;
        // A key's next round starts only while a call can still answer before the deadline (the
        // claim window, as for a claim): a claim of 10 rows of a key takes 10 calls one after
        // another, which the claim window does not cover. The rest goes back unpublished, no
        // attempt spent, instead of a call left open at the deadline (its row charged an attempt).
        if (round.length > 0 && !ctx.callFitsBeforeDeadline()) {
          for (const cursor of round) released.push(...cursor.lane.slice(cursor.at).map(claimOf));
          round = [];
        }
      }
    } finally {
      ctx.keeper.releaseMany(watched);
    }
    await ctx.keeper.idle();
    if (ctx.closed()) return;
    await settle();
  } finally {
    ctx.unfinished.delete(settle);
  }
}

/** `settleBatch`, the rows it did not write for lack of time told to `notSent`. */
async function settleInTime(ctx: PassContext, plan: SettlePlan, unstarted: ClaimRef[], ordered: boolean, notSent: NotSent): Promise<void> {
  const outOfTime = await settleBatch(ctx, plan, unstarted, ordered);
  if (outOfTime.rows > 0) notSent(outOfTime.rows, outOfTime.delivered);
}

/** One round of `deliverPipelined`: at most one row per key, every call at once; resolves when all answered. */
async function publishRound(
  ctx: PassContext,
  rows: OutboxRow[],
  plan: SettlePlan,
  state: { sent: Set<string>; inCall: Map<string, CallClaims>; chunks: Array<{ rows: OutboxRow[]; claims: CallClaims }> },
): Promise<void> {
  const byDestination = new Map<Destination, OutboxRow[]>();
  for (const row of rows) {
    const destination = routeOrDead(ctx, row, plan);
    if (destination === undefined) continue;
    const list = byDestination.get(destination) ?? [];
    list.push(row);
    byDestination.set(destination, list);
  }
  const calls: Array<Promise<void>> = [];
  for (const [destination, list] of byDestination) {
    for (let i = 0; i < list.length; i += destination.maxBatchSize) {
      const chunk = list.slice(i, i + destination.maxBatchSize);
      const claims = new CallClaims(chunk.length);
      state.chunks.push({ rows: chunk, claims });
      for (const row of chunk) state.inCall.set(row.id, claims);
      calls.push(
        ctx.limiter
          .run(() => publishChunk(ctx, destination, chunk, claims, plan, state.sent))
          .finally(() => {
            for (const row of chunk) state.inCall.delete(row.id);
          }),
      );
    }
  }
  await Promise.all(calls);
}

/** The destination of `row`; undefined when none (the row is then dead now in `plan`). */
function routeOrDead(ctx: PassContext, row: OutboxRow, plan: SettlePlan): Destination | undefined {
  const name = ctx.router(row.topic);
  const destination = name === undefined ? undefined : ctx.destinations.get(name);
  if (name === undefined) {
    plan.deadNow(row, `no route matches topic "${row.topic}" (outbox.routes)`, { destinationName: NO_ROUTE, errorClass: 'NoRoute' });
  } else if (destination === undefined) {
    plan.deadNow(row, `route for topic "${row.topic}" names destination "${name}", which is not configured`, { destinationName: name, errorClass: 'UnknownDestination' });
  }
  return destination;
}

async function publishChunk(ctx: PassContext, destination: Destination, chunk: OutboxRow[], claims: CallClaims, plan: SettlePlan, sent?: Set<string>): Promise<void> {
  const owned = ctx.lost.size === 0 ? chunk : chunk.filter((row) => !ctx.lost.has(claimKey(claimOf(row))));
  if (owned.length === 0 || ctx.calls.stopped) return;
  const call = claims.open(ctx.calls);
  ctx.tally.publishCalls++;
  const progress = new ChunkProgress(ctx, destination, owned, plan, sent);
  claims.progress = progress;
  const started = performance.now();
  let outcomes: EntryOutcome[];
  try {
    outcomes = await destination.publishBatch(owned.map(toOutbound), call.signal, progress);
  } catch (error) {
    const reason = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    const errorClass = error instanceof Error ? error.name : 'Error';
    outcomes = owned.map((row) => ({ id: row.id, status: 'retryable', error: `the call threw ${reason}`, errorClass }));
  } finally {
    call.dispose();
  }
  if (ctx.closed()) return; // abandoned by a pass that stopped waiting: what answered before is in the plan
  ctx.publishTimed(destination.type, performance.now() - started);
  // Destinations answer in entry order; look ids up only when they do not.
  const inOrder = outcomes.length === owned.length && outcomes.every((o, i) => o.id === owned[i]!.id);
  const byId = inOrder ? undefined : new Map(outcomes.map((o) => [o.id, o]));
  const recorded = progress.recorded;
  const rows: OutboxRow[] = [];
  const answers: EntryOutcome[] = [];
  for (let i = 0; i < owned.length; i++) {
    const row = owned[i]!;
    if (recorded?.has(row.id) === true) continue;
    rows.push(row);
    answers.push((inOrder ? outcomes[i] : byId!.get(row.id)) ?? { id: row.id, status: 'retryable' as const, error: 'returned no outcome for this entry', errorClass: 'NoOutcome' });
  }
  recordOutcomes(ctx, destination, plan, rows, answers, sent);
}

/** Puts `outcomes[i]` of `rows[i]` into the plan, one metric update per outcome kind. */
function recordOutcomes(ctx: PassContext, destination: Destination, plan: SettlePlan, rows: readonly OutboxRow[], outcomes: readonly EntryOutcome[], sent: Set<string> | undefined): void {
  const perOutcome = new Map<EntryOutcome['status'], number>();
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!;
    const outcome = outcomes[i]!;
    perOutcome.set(outcome.status, (perOutcome.get(outcome.status) ?? 0) + 1);
    plan.add(row, outcome, destination);
    if (outcome.status === 'sent') sent?.add(row.id);
  }
  // One metric update per outcome kind and call, not per row.
  for (const [outcome, n] of perOutcome) ctx.metrics.count('outboxDestinationMessages', n, { destination: destination.name, outcome });
}

/**
 * What a destination told of a call it split into several service calls (`CallProgress`), as it
 * went: each service call's outcomes go into the plan when it answers, so a pass that stops
 * waiting with a later service call open settles them, and releases the rows never offered.
 * A destination that sends one call tells nothing, and this stays empty.
 */
class ChunkProgress implements CallProgress {
  /** Rows neither offered nor answered yet; undefined until the destination first tells. */
  untouched: Set<string> | undefined;
  /** Rows whose outcome is in the plan already (or that were not offered, their claim lost). */
  recorded: Set<string> | undefined;
  #offers = 0;

  constructor(
    private readonly ctx: PassContext,
    private readonly destination: Destination,
    private readonly owned: readonly OutboxRow[],
    private readonly plan: SettlePlan,
    private readonly sent: Set<string> | undefined,
  ) {}

  /**
   * A later service call is one more call of the pass (the first was counted when the call opened);
   * it leaves out the rows whose claim was lost since the batch began: another claim may have
   * published them, and later rows of their key, already.
   */
  offering(indexes: readonly number[]): readonly number[] {
    const untouched = this.#untouched();
    let offered: number[] | undefined;
    for (const [at, i] of indexes.entries()) {
      const row = this.owned[i]!;
      untouched.delete(row.id);
      if (this.ctx.lost.size > 0 && this.ctx.lost.has(claimKey(claimOf(row)))) {
        offered ??= indexes.slice(0, at);
        (this.recorded ??= new Set()).add(row.id);
      } else offered?.push(i);
    }
    const sending = offered ?? indexes;
    if (sending.length > 0 && this.#offers++ > 0) this.ctx.tally.publishCalls++;
    return sending;
  }

  answered(indexes: readonly number[], outcomes: readonly EntryOutcome[]): void {
    const untouched = this.#untouched();
    for (const i of indexes) untouched.delete(this.owned[i]!.id);
    // A service call that answers after the pass stopped waiting adds nothing: the pass has taken
    // the plan (its rows stay processing for their lease, as an open call's do).
    if (this.ctx.closed()) return;
    const recorded = (this.recorded ??= new Set());
    const rows: OutboxRow[] = [];
    const answers: EntryOutcome[] = [];
    indexes.forEach((index, i) => {
      const row = this.owned[index];
      const outcome = outcomes[i];
      if (row === undefined || outcome === undefined || recorded.has(row.id)) return;
      recorded.add(row.id);
      rows.push(row);
      answers.push(outcome);
    });
    recordOutcomes(this.ctx, this.destination, this.plan, rows, answers, this.sent);
  }

  #untouched(): Set<string> {
    return (this.untouched ??= new Set(this.owned.map((row) => row.id)));
  }
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
    // An empty key is no key (as for the claim): a destination sees null.
    this.key = row.key === '' ? null : row.key;
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
