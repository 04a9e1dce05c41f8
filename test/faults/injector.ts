/**
 * Faults that come from outside the invocations, on timers drawn from a seeded generator:
 * server-side connection kills (`pg_terminate_backend`), a lock held on a table so statements of
 * invocations with a small `statement_timeout` time out, and an emulated database restart (every
 * connection of every live invocation terminated, repeatedly, for about a second).
 *
 * Only the pids of the suite's own invocation pools are ever terminated (other users of a shared
 * server keep theirs); the injector and checker use a separate pool.
 */
import type pg from 'pg';
import type { InvocationFaults } from './invocation-faults.ts';
import type { Prng } from './prng.ts';

export interface InjectorCounts {
  connectionKills: number;
  lockWindows: number;
  restarts: number;
}

export class Injector {
  readonly counts: InjectorCounts = { connectionKills: 0, lockWindows: 0, restarts: 0 };
  #stopped = false;
  readonly #loops: Array<Promise<void>> = [];

  constructor(
    private readonly admin: pg.Pool,
    private readonly schema: string,
    private readonly live: ReadonlySet<InvocationFaults>,
    private readonly prng: Prng,
  ) {}

  /** Terminates the given backends (a killed invocation's, or one at random). */
  async terminate(pids: Iterable<number>): Promise<number> {
    const list = [...pids];
    if (list.length === 0) return 0;
    try {
      const { rows } = await this.admin.query<{ n: number }>(
        `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE pid = ANY($1::int[]) AND application_name = 'queuebox'`,
        [list],
      );
      return rows[0]?.n ?? 0;
    } catch {
      return 0;
    }
  }

  /** Starts the timers; `restartAtMs` is when the emulated restart begins (undefined: none). */
  start(restartAtMs: number | undefined): void {
    this.#loops.push(this.#every(150, 600, async () => {
      const candidates = [...this.live].filter((f) => f.pids.size > 0 && !f.killed);
      if (candidates.length === 0) return;
      const victim = this.prng.pick(candidates);
      this.counts.connectionKills += await this.terminate([this.prng.pick([...victim.pids])]);
    }));
    this.#loops.push(this.#every(1500, 3000, async () => {
      const table = this.prng.pick(['outbox', 'inbox']);
      const client = await this.admin.connect();
      try {
        await client.query('BEGIN');
        // Without a lock timeout the waiting LOCK would queue every writer behind a slow claim.
        await client.query(`SET LOCAL lock_timeout = '100ms'`);
        await client.query(`LOCK TABLE "${this.schema}".${table} IN EXCLUSIVE MODE`);
        this.counts.lockWindows++;
        await client.query('SELECT pg_sleep(0.4)');
        await client.query('COMMIT');
      } catch {
        await client.query('ROLLBACK').catch(() => {});
      } finally {
        client.release();
      }
    }));
    if (restartAtMs !== undefined) {
      this.#loops.push((async () => {
        await this.#sleep(restartAtMs);
        if (this.#stopped) return;
        this.counts.restarts++;
        const until = Date.now() + 1200;
        while (Date.now() < until && !this.#stopped) {
          await this.terminate([...this.live].flatMap((f) => [...f.pids]));
          await this.#sleep(40);
        }
      })());
    }
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await Promise.all(this.#loops);
  }

  async #every(minMs: number, maxMs: number, act: () => Promise<void>): Promise<void> {
    while (!this.#stopped) {
      await this.#sleep(this.prng.int(minMs, maxMs));
      if (!this.#stopped) await act();
    }
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }
}
