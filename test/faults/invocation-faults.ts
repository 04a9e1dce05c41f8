/**
 * What the fault injector can do to one "invocation" (one Lambda-like run of a pass), and the
 * wrappers that make it so:
 *
 * - freeze: every database call and destination call of the invocation waits until the thaw,
 *   before it starts and before its result is handed back (a paused process: its renewals stop too);
 * - kill: the invocation never gets another result — every call in flight or to come hangs
 *   forever — and its server connections are terminated, so a transaction in flight rolls back
 *   (the process died mid-publish or mid-transaction; its rows stay `processing`).
 *
 * The driver wrapper also writes the caller's view of every fenced write into the `Ledger`, only
 * when the result actually reaches the caller (a killed invocation's late results are not seen).
 */
import type { Driver } from '../../lib/db/driver.ts';
import type pg from 'pg';

/** The caller-side observations the checker compares with the database and the counters. */
export class Ledger {
  /** Every `outboxMarkSentMany` change reported to a pass: row id and the token it wrote with. */
  readonly sentReports: Array<{ id: string; token: string }> = [];
  /** Fenced settle writes (sent/retry/dead/forward) that changed no row, per component. */
  readonly settleLost = { outbox: 0, inbox: 0 };
  /** Renewal claims missing from a renewal's result, per component (upper bound of renewal losses). */
  readonly renewMissing = { outbox: 0, inbox: 0 };
  /** Claims of renewals that failed with an error (upper bound of renewal losses). */
  readonly renewFailed = { outbox: 0, inbox: 0 };
  /** Reclaim calls made, and those whose result reached the pass. */
  readonly reclaimCalls = { outbox: 0, inbox: 0 };
  readonly reclaimReported = { outbox: 0, inbox: 0 };
  /** Database errors seen by invocations, by kind. */
  readonly errors = { statementTimeout: 0, connection: 0, other: 0 };
}

const NEVER = new Promise<never>(() => {});

/** Freeze / kill state of one invocation and the server pids of its pool. */
export class InvocationFaults {
  readonly pids = new Set<number>();
  /**
   * 'error' events on checked-out clients (a connection cut while a transaction's client sat idle
   * between statements). lib/db/postgres/pg-pool.ts listens only on the pool, so without this
   * listener such an event would crash the process; the suite counts them instead.
   */
  clientErrors = 0;
  killed = false;
  #thaw: Promise<void> | undefined;

  /** Tracks the backend pid of every connection `pool` opens. */
  constructor(pool: pg.Pool) {
    pool.on('connect', (client) => {
      const pid = (client as unknown as { processID?: number }).processID;
      if (typeof pid === 'number') this.pids.add(pid);
      client.on('error', () => {
        this.clientErrors++;
      });
    });
  }

  /** Resolves when the invocation may go on; never, once killed. */
  async gate(): Promise<void> {
    while (this.#thaw !== undefined) await this.#thaw;
    if (this.killed) return NEVER;
  }

  /** Pauses the invocation for `ms` (a freeze already in progress is kept). */
  freeze(ms: number): void {
    this.#thaw ??= new Promise<void>((resolve) => setTimeout(resolve, ms)).then(() => {
      this.#thaw = undefined;
    });
  }

  get frozen(): boolean {
    return this.#thaw !== undefined;
  }

  /** From now on nothing of this invocation runs or returns. */
  kill(): void {
    this.killed = true;
  }

  /** Runs `fn` between two gates; `observe` sees the outcome only when it reaches the caller. */
  async run<T>(fn: () => Promise<T>, observe: { ok?: (result: T) => void; fail?: (error: unknown) => void } = {}): Promise<T> {
    await this.gate();
    let result: T;
    try {
      result = await fn();
    } catch (error) {
      await this.gate();
      observe.fail?.(error);
      throw error;
    }
    await this.gate();
    observe.ok?.(result);
    return result;
  }
}

/** Classifies a database error for the ledger. */
function noteError(ledger: Ledger, error: unknown): void {
  const text = `${String((error as { code?: unknown })?.code ?? '')} ${String((error as Error)?.message ?? error)}`;
  if (/57014|statement timeout/i.test(text)) ledger.errors.statementTimeout++;
  else if (/57P0|08\d\d\d|terminat|ECONN|connection/i.test(text)) ledger.errors.connection++;
  else ledger.errors.other++;
}

/** A driver whose every call passes the invocation's gates, recording fenced outcomes in `ledger`. */
export function faultyDriver(base: Driver, faults: InvocationFaults, ledger: Ledger): Driver {
  const wrapped: Record<string, unknown> = { dialect: base.dialect };
  for (const [name, value] of Object.entries(base)) {
    if (typeof value !== 'function') continue;
    const fn = value as (...args: unknown[]) => Promise<unknown>;
    wrapped[name] = (...args: unknown[]) => faults.run(() => fn(...args), { fail: (error) => noteError(ledger, error) });
  }
  const d = wrapped as unknown as Driver;
  const lostOf = (component: 'outbox' | 'inbox', asked: number) => (changed: string[]) => {
    ledger.settleLost[component] += asked - changed.length;
  };
  const fail = (error: unknown) => noteError(ledger, error);
  for (const component of ['outbox', 'inbox'] as const) {
    const renew = component === 'outbox' ? base.outboxRenewMany : base.inboxRenewMany;
    const retry = component === 'outbox' ? base.outboxRetryMany : base.inboxRetryMany;
    const dead = component === 'outbox' ? base.outboxMarkDeadMany : base.inboxMarkDeadMany;
    const reclaim = component === 'outbox' ? base.outboxReclaimExpired : base.inboxReclaimExpired;
    const renewName = component === 'outbox' ? 'outboxRenewMany' : 'inboxRenewMany';
    (d as unknown as Record<string, unknown>)[renewName] = (p: Parameters<Driver['outboxRenewMany']>[0]) =>
      faults.run(() => renew(p), {
        ok: (ids) => {
          ledger.renewMissing[component] += p.claims.length - ids.length;
        },
        fail: (error) => {
          ledger.renewFailed[component] += p.claims.length;
          noteError(ledger, error);
        },
      });
    (d as unknown as Record<string, unknown>)[component === 'outbox' ? 'outboxRetryMany' : 'inboxRetryMany'] = (p: Parameters<Driver['outboxRetryMany']>[0]) =>
      faults.run(() => retry(p), { ok: lostOf(component, p.items.length), fail });
    (d as unknown as Record<string, unknown>)[component === 'outbox' ? 'outboxMarkDeadMany' : 'inboxMarkDeadMany'] = (p: Parameters<Driver['outboxMarkDeadMany']>[0]) =>
      faults.run(() => dead(p), { ok: lostOf(component, p.items.length), fail });
    (d as unknown as Record<string, unknown>)[component === 'outbox' ? 'outboxReclaimExpired' : 'inboxReclaimExpired'] = (p: { throttleMs?: number; maxAttempts: number }) => {
      ledger.reclaimCalls[component]++;
      return faults.run(() => reclaim(p), {
        ok: () => {
          ledger.reclaimReported[component]++;
        },
        fail,
      });
    };
  }
  d.outboxMarkSentMany = (p) =>
    faults.run(() => base.outboxMarkSentMany(p), {
      ok: (ids) => {
        const changed = new Set(ids);
        for (const c of p.claims) if (changed.has(c.id)) ledger.sentReports.push({ id: c.id, token: c.token });
        ledger.settleLost.outbox += p.claims.length - ids.length;
      },
      fail,
    });
  const forwardMany = base.inboxForwardMany;
  d.inboxForwardMany =
    forwardMany === undefined ? undefined : (items, defaults) => faults.run(() => forwardMany(items, defaults), { ok: lostOf('inbox', items.length), fail });
  d.inboxForward = (item, defaults) =>
    faults.run(() => base.inboxForward(item, defaults), {
      ok: (changed) => {
        if (!changed) ledger.settleLost.inbox++;
      },
      fail,
    });
  return d;
}
