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
  // A backend that ends while the processes are read is reaped by the postmaster at some moment
  // of the read: before the backend's own line was read (its CPU in neither, when the postmaster
  // was read first) or after (in both, when read last). So the postmasters (the `postgres`
  // processes whose parent is not one) are read again at the end, and the whole read is made
  // again while their reaped children's CPU changed meanwhile: a read during which nothing was
  // reaped counts each process once. In a bench a case closes its connections just before its
  // drain ends, and a lost backend had taken the whole drain's CPU with it (0.5 ms per 1,000
  // messages for a drain that took 45).
  for (let attempt = 1; ; attempt++) {
    const read = readPostgres();
    if (read === undefined) return { postgres: new Map(), busy: 0, total: 0 };
    const stable = read.roots.every((pid) => readStat(pid)?.reaped === read.reaped.get(pid));
    if (stable || attempt >= 10) {
      const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.split(/\s+/).slice(1).map(Number);
      const idle = cpu[3]! + cpu[4]!;
      const total = cpu.reduce((a, b) => a + b, 0);
      return { postgres: read.postgres, busy: (total - idle) / CLOCK_TICKS, total: total / CLOCK_TICKS };
    }
  }
}

/** One `postgres` process's /proc stat: parent pid, own and reaped children's CPU seconds. */
function readStat(pid: string): { ppid: string; own: number; reaped: number } | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
  if (name !== 'postgres') return undefined;
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // ppid is field 4 of stat; utime, stime, cutime, cstime fields 14–17 (2 and 12–15 after the name).
  return { ppid: fields[1]!, own: (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS, reaped: (Number(fields[13]) + Number(fields[14])) / CLOCK_TICKS };
}

/** Every `postgres` process's CPU (own + reaped children's), the postmasters among them, and their reaped CPU as read; undefined off Linux. */
function readPostgres(): { postgres: Map<string, number>; roots: string[]; reaped: Map<string, number> } | undefined {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  } catch {
    return undefined;
  }
  const postgres = new Map<string, number>();
  const reaped = new Map<string, number>();
  const parents = new Map<string, string>();
  for (const pid of pids) {
    const stat = readStat(pid);
    if (stat === undefined) continue;
    postgres.set(pid, stat.own + stat.reaped);
    reaped.set(pid, stat.reaped);
    parents.set(pid, stat.ppid);
  }
  const roots = [...parents].filter(([, ppid]) => !parents.has(ppid)).map(([pid]) => pid);
  return { postgres, roots, reaped };
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
