/**
 * CPU of a PostgreSQL server on this machine, read from /proc: the bench's server is local, so
 * the database's share of the work (claims, settles, index upkeep) can be measured per message
 * beside the client's (`process.cpuUsage`). Every `postgres` process counts (every session of the
 * server, other users' too), with the CPU of the children it reaped: a backend that ends between
 * two samples — a bench case closes its connections before its drain returns — passes its CPU on
 * to the postmaster's, so the difference of the two sums is what the server used in between.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** Kernel clock ticks per second of /proc/<pid>/stat (USER_HZ, 100 on Linux). */
const CLOCK_TICKS = 100;

/** One reading: CPU seconds per `postgres` process, and the machine's busy and total CPU seconds. */
export interface CpuSample {
  postgres: Map<string, number>;
  busy: number;
  total: number;
}

/**
 * CPU seconds per `postgres` process (user + system, its own and its reaped children's, by pid),
 * and the machine's busy and total CPU seconds; an empty map off Linux.
 */
export function cpuSample(): CpuSample {
  const postgres = new Map<string, number>();
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  } catch {
    return { postgres, busy: 0, total: 0 };
  }
  for (const pid of pids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue;
    }
    const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    if (name !== 'postgres') continue;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime, stime, cutime, cstime: fields 14–17 of stat, 12–15 after the name.
    postgres.set(pid, (Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) / CLOCK_TICKS);
  }
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.split(/\s+/).slice(1).map(Number);
  const idle = cpu[3]! + cpu[4]!;
  const total = cpu.reduce((a, b) => a + b, 0);
  return { postgres, busy: (total - idle) / CLOCK_TICKS, total: total / CLOCK_TICKS };
}

/**
 * CPU seconds the `postgres` processes used between two samples: the difference of the sums (a
 * process that ended meanwhile is in the second sum through the postmaster that reaped it).
 */
export function postgresSeconds(before: Map<string, number>, after: Map<string, number>): number {
  let seconds = 0;
  for (const used of after.values()) seconds += used;
  for (const used of before.values()) seconds -= used;
  return Math.max(0, seconds);
}
