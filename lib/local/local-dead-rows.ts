/**
 * The dead rows of a local run, as they happen: after each progress line the runner hands this
 * watch the counts it read, and for each table whose `dead` count grew it prints the newest dead
 * rows — one line each with the outbox row's topic and destination (or the inbox row's source)
 * and its `last_error` — at most `MAX_DEAD_LINES` per table and tick, then a line for the rest.
 *
 * Rows already dead when the run starts are not reported; `newlyDead` counts the rows that became
 * dead during the run (a finite run that ends with any exits non-zero, see `bin/cli-program.ts`).
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import type { Driver } from '../db/driver.ts';
import { createRouter, type Router } from '../outbox/routes.ts';
import { terminalText } from '../operations/terminal-text.ts';

/** Dead rows printed per table and progress tick; the rest are counted in one line. */
export const MAX_DEAD_LINES = 10;

type Table = 'outbox' | 'inbox';

/** Watches both tables' dead rows; `begin()` takes the baseline. */
export class DeadRowWatch {
  readonly #driver: Driver;
  readonly #route: Router;
  readonly #out: (line: string) => void;
  readonly #seen = new Set<string>();
  readonly #baseline: Record<Table, number> = { outbox: 0, inbox: 0 };
  readonly #last: Record<Table, number> = { outbox: 0, inbox: 0 };

  constructor(driver: Driver, config: Pick<QueueBoxConfig, 'outbox'>, out: (line: string) => void) {
    this.#driver = driver;
    this.#route = createRouter(config.outbox.routes);
    this.#out = out;
  }

  /** Reads the dead counts the run starts with; they are not reported. */
  async begin(): Promise<void> {
    const [outbox, inbox] = await Promise.all([this.#driver.outboxStats(), this.#driver.inboxStats()]);
    this.#baseline.outbox = this.#last.outbox = outbox.counts.dead ?? 0;
    this.#baseline.inbox = this.#last.inbox = inbox.counts.dead ?? 0;
  }

  /** Rows that became dead since `begin()` (both tables). */
  get newlyDead(): number {
    return Math.max(0, this.#last.outbox - this.#baseline.outbox) + Math.max(0, this.#last.inbox - this.#baseline.inbox);
  }

  /** Prints the rows that became dead since the last call, given the counts just read. */
  async report(counts: Record<Table, Record<string, number>>): Promise<void> {
    for (const table of ['outbox', 'inbox'] as const) {
      const dead = counts[table].dead ?? 0;
      const grown = dead - this.#last[table];
      this.#last[table] = dead;
      if (grown <= 0) continue;
      const limit = Math.min(grown, MAX_DEAD_LINES);
      const rows = table === 'outbox' ? await this.#driver.outboxDeadList({ limit }) : await this.#driver.inboxDeadList({ limit });
      let printed = 0;
      for (const row of rows) {
        if (this.#seen.has(`${table}:${row.id}`)) continue;
        this.#seen.add(`${table}:${row.id}`);
        printed++;
        const where = table === 'outbox' ? `topic ${oneLine(row.topicOrSource)} → destination ${this.#route(row.topicOrSource) ?? '(no route)'}` : `source ${oneLine(row.topicOrSource)}`;
        this.#out(`dead ${table} row ${row.id} (${where}): ${oneLine(row.lastError ?? '(no error recorded)')}`);
      }
      if (grown > printed) this.#out(`… and ${grown - printed} more dead ${table} rows (\`queuebox status\` lists the latest with their errors)`);
    }
  }
}

/** One line of a row's text, its control characters shown, not obeyed (`terminalText`). */
function oneLine(text: string): string {
  return terminalText(text.replace(/\s*\n\s*/g, ' '));
}
