/**
 * Status as an operation: counts per state per table, the oldest due pending age, the latest
 * dead rows with their last errors, and when each scheduled worker last finished a pass (its row
 * in the maintenance table, stamped at the end of every pass), plus a fixed-width text rendering
 * for the CLI.
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import { PASS_WORKERS, type DeadRowSummary, type Driver, type PassWorker } from '../db/driver.ts';
import { terminalText } from './terminal-text.ts';

/** One table's status. Ages are in seconds. */
export interface TableStatus {
  table: string;
  counts: Record<string, number>;
  oldestPendingAgeSeconds: number;
  /** Latest dead rows, newest first, at most `deadLimit`. */
  dead: DeadRowSummary[];
}

/** A worker's last finished pass (database clock) and its age in seconds; `null`: none recorded. */
export type LastPass = { finishedAt: Date; ageSeconds: number } | null;

export interface StatusReport {
  outbox: TableStatus;
  inbox: TableStatus;
  /** The last finished pass of each scheduled worker (outbox poller, inbox relay, reclaim). */
  passes: Record<PassWorker, LastPass>;
}

/** Reads both tables' stats and dead lists and the workers' last passes (five reads, concurrently). */
export async function collectStatus(driver: Driver, config: Pick<QueueBoxConfig, 'tables'>, options: { deadLimit?: number } = {}): Promise<StatusReport> {
  const limit = options.deadLimit ?? 10;
  const [outboxStats, inboxStats, outboxDead, inboxDead, finished] = await Promise.all([
    driver.outboxStats(),
    driver.inboxStats(),
    driver.outboxDeadList({ limit }),
    driver.inboxDeadList({ limit }),
    driver.passListFinished(),
  ]);
  const passes = Object.fromEntries(PASS_WORKERS.map((w) => [w, null])) as Record<PassWorker, LastPass>;
  for (const p of finished) passes[p.worker] = { finishedAt: p.finishedAt, ageSeconds: p.ageSeconds };
  return {
    outbox: { table: config.tables.outbox, ...outboxStats, dead: outboxDead },
    inbox: { table: config.tables.inbox, ...inboxStats, dead: inboxDead },
    passes,
  };
}

const STATES = { outbox: ['pending', 'processing', 'sent', 'dead'], inbox: ['pending', 'processing', 'processed', 'dead'] } as const;

/** Renders the report as aligned text tables (no colours, safe to pipe). */
export function formatStatus(report: StatusReport): string {
  const lines: string[] = [];
  const rows: string[][] = [['table', 'state', 'rows']];
  for (const kind of ['outbox', 'inbox'] as const) {
    for (const state of STATES[kind]) rows.push([report[kind].table, state, String(report[kind].counts[state] ?? 0)]);
  }
  lines.push(...table(rows), '');
  lines.push(`oldest pending: outbox ${formatAge(report.outbox.oldestPendingAgeSeconds)}, inbox ${formatAge(report.inbox.oldestPendingAgeSeconds)}`);
  lines.push(
    '',
    ...table([
      ['function', 'last finished pass', 'ago'],
      ...PASS_WORKERS.map((w) => {
        const last = report.passes[w];
        return last === null ? [w, 'never', ''] : [w, last.finishedAt.toISOString(), formatAge(last.ageSeconds)];
      }),
    ]),
  );
  for (const kind of ['outbox', 'inbox'] as const) {
    const dead = report[kind].dead;
    lines.push('', `dead ${kind} rows (latest ${dead.length}):`);
    if (dead.length === 0) {
      lines.push('  none');
      continue;
    }
    lines.push(
      ...table([
        ['id', kind === 'outbox' ? 'topic' : 'source', 'updated', 'last error'],
        ...dead.map((d) => [d.id, terminalText(d.topicOrSource), d.updatedAt.toISOString(), oneLine(d.lastError ?? '')]),
      ]).map((l) => `  ${l}`),
    );
  }
  return `${lines.join('\n')}\n`;
}

function table(rows: string[][]): string[] {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ').trimEnd());
}

function oneLine(text: string): string {
  const flat = terminalText(text.replace(/\s+/g, ' ').trim());
  return flat.length > 120 ? `${flat.slice(0, 117)}...` : flat;
}

/** `0s`, `42s`, `5m 3s`, `2h 10m`. */
export function formatAge(seconds: number): string {
  const s = Math.floor(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}
