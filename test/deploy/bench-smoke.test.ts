/**
 * `npm run bench` keeps working (docs/performance.md tells operators to run it): a tiny run of
 * the floor and the QueueBox pass on two workloads, checked for what it reports — every message
 * moved, a ratio to the floor, round trips, the settings each case ran with — never for how fast
 * (speed is measured by the bench itself, not by tests). `npm run bench:sweep` likewise: a tiny
 * sweep of the floor reports one of the settings it tried as the best. The same for `npm run bench:latency`: every message it wrote is in its
 * latencies, whatever they are.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { testDatabaseUrl } from '../helpers/database.ts';
import { runTsx } from '../helpers/run-tsx.ts';

interface Line {
  case: string;
  workload: string;
  messages: number;
  capped: boolean;
  messagesPerSecond: number;
  ratioToFloor: number | null;
  ratioToGraphileWorker: number | null;
  settings: string;
  tuning?: Record<string, unknown>;
  roundTripsPerMessage: number;
  peakRssMb: number;
  serverCpuMsPer1000?: number | null;
  notes?: Record<string, number | string>;
}

describe('npm run bench', () => {
  it('drains every message of each workload in each case and reports ratios, round trips and RSS', async () => {
    const { code, stdout, stderr } = await runTsx(
      ['bench/run.ts', '--cases', 'floor,queuebox', '--workloads', 'unkeyed,keys-100', '--sizes', '400', '--rounds', '1', '--warmup', '100', '--set', 'floor.batch=50', '--set', 'floor.loops=3', '--set', 'floor.claim=in'],
      { ...process.env, DATABASE_URL: testDatabaseUrl() },
    );
    assert.equal(code, 0, stderr);
    const lines = stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Line);
    assert.deepEqual(
      lines.map((l) => `${l.workload}/${l.case}`),
      ['unkeyed/floor', 'unkeyed/queuebox', 'keys-100/floor', 'keys-100/queuebox'],
    );
    for (const l of lines) {
      assert.equal(l.messages, 400, `${l.workload}/${l.case} moved every message`);
      assert.equal(l.capped, false);
      assert.ok(l.messagesPerSecond > 0 && l.peakRssMb > 0 && l.roundTripsPerMessage > 0, JSON.stringify(l));
      // A number when the test server runs on this machine (its CPU is read from /proc), else null.
      assert.ok(l.serverCpuMsPer1000 === null || (typeof l.serverCpuMsPer1000 === 'number' && l.serverCpuMsPer1000 >= 0), `server CPU per 1,000 messages: ${JSON.stringify(l)}`);
      assert.equal(l.ratioToFloor === null, l.case === 'floor', `${l.case}: a ratio to the floor unless it is the floor`);
      assert.equal(l.ratioToGraphileWorker, null, 'no graphile-worker case ran');
      // The `--set` settings are the floor's, over whatever bench/best-settings.json holds.
      if (l.case === 'floor') {
        assert.deepEqual({ batch: l.tuning?.batch, loops: l.tuning?.loops, claim: l.tuning?.claim }, { batch: 50, loops: 3, claim: 'in' });
        assert.match(l.settings, /^raw SQL, 3 loop\(s\) x \(claim 50 SKIP LOCKED \[in/);
      }
      // The passes' claims called the functions `migrate` made for the default batch size.
      if (l.case === 'queuebox') assert.equal(l.notes?.claimFunctionsMissing, 0, `${l.workload}/${l.case}: ${JSON.stringify(l.notes)}`);
      // The keyed drain went through the order check at the destination, and kept per-key order.
      if (l.case === 'queuebox') assert.equal(l.notes?.orderViolations, l.workload === 'keys-100' ? 0 : undefined, JSON.stringify(l.notes));
    }
    assert.match(stdout, /\| workload \| case \| msg\/s \| × floor \| × graphile-worker \|/, 'the readable table follows the JSON lines');
    assert.match(stdout, /\| keys-100 \| queuebox \|.*\| 400 \| 0 \|/, 'the table shows no order violation on the keyed queuebox row');
    assert.match(stdout, /\| unkeyed \| 50 × 3 loops, in(, prepared)? \| [\d,]+ \| – \| – \| [\d,]+ \| [\d.]+ \| – \|/, 'the summary names the floor setting and QueueBox × floor');
  });

  it('runs the backlogs --rounds times too, each on a table seeded anew, and reports their median', async () => {
    const { code, stdout, stderr } = await runTsx(
      ['bench/run.ts', '--cases', 'floor,queuebox', '--workloads', 'backlog', '--sizes', '200,1500,300', '--rounds', '2', '--warmup', '0', '--set', 'floor.batch=50'],
      { ...process.env, DATABASE_URL: testDatabaseUrl() },
    );
    assert.equal(code, 0, stderr);
    const lines = stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Line & { runs?: number[] });
    assert.deepEqual(lines.map((l) => `${l.workload}/${l.case}`), ['backlog/floor', 'backlog/queuebox']);
    for (const l of lines) {
      assert.equal(l.messages, 300, `${l.case} drained the first 300 of the 1,500-row backlog`);
      assert.equal(l.runs?.length, 2, `${l.case}: one rate per round: ${JSON.stringify(l.runs)}`);
      assert.ok(l.runs!.includes(l.messagesPerSecond), `${l.case}: the reported run is one of its runs`);
    }
  });

  it('bench:claim-plans explains the claim the driver sends', async () => {
    const { code, stdout, stderr } = await runTsx(['bench/claim-plans.ts', '--rows', '500', '--keys', '0', '--in-flight', '0', '--limit', '10'], { ...process.env, DATABASE_URL: testDatabaseUrl() });
    assert.equal(code, 0, stderr);
    const line = JSON.parse(stdout.split('\n').find((l) => l.startsWith('{'))!) as { kind: string; claimed: number; buffers: number };
    assert.equal(line.kind, 'outbox');
    assert.equal(line.claimed, 10, stdout);
    assert.ok(line.buffers > 0, stdout);
  });

  it('bench:sweep reports the best of the floor settings it tried', async () => {
    const { code, stdout, stderr } = await runTsx(
      ['bench/sweep.ts', '--cases', 'floor', '--workloads', 'unkeyed', '--sizes', '300', '--batches', '50', '--loops', '1,2', '--confirm', '0', '--warmup', '0', '--dry-run'],
      { ...process.env, DATABASE_URL: testDatabaseUrl() },
      180_000,
    );
    assert.equal(code, 0, stderr);
    const lines = stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { workload: string; case: string; best: string; messagesPerSecond: number; runs: number[] });
    assert.equal(lines.length, 1, stdout);
    const [line] = lines;
    assert.deepEqual([line!.workload, line!.case], ['unkeyed', 'floor']);
    // Two sizes, then the three other statement shapes at the better one.
    const tried = stderr.split('\n').filter((l) => l.startsWith('unkeyed floor '));
    assert.equal(tried.length, 5, stderr);
    assert.ok(tried.some((l) => l.includes(`${line!.best}: ${line!.messagesPerSecond} msg/s`)), `${line!.best} is the setting tried at that rate`);
    const rates = tried.map((l) => Number(/: (\d+) msg\/s/.exec(l)![1]));
    assert.equal(line!.messagesPerSecond, Math.max(...rates), 'the best is the fastest tried');
  });

  it('bench:sweep runs graphile-worker on a keyed workload only with localQueue off (the setting that keeps per-queue order)', async () => {
    const { code, stderr } = await runTsx(
      ['bench/sweep.ts', '--cases', 'graphile-worker', '--workloads', 'keys-100', '--sizes', '300', '--concurrency', '4', '--local-queue', '0,500', '--confirm', '0', '--warmup', '0', '--peer-seconds', '10', '--dry-run'],
      { ...process.env, DATABASE_URL: testDatabaseUrl() },
      180_000,
    );
    assert.equal(code, 0, stderr);
    const tried = stderr.split('\n').filter((l) => l.startsWith('keys-100 graphile-worker '));
    assert.deepEqual(tried.map((l) => /graphile-worker (\S+ \S+):/.exec(l)?.[1]), ['concurrency=4 localQueue=0'], stderr);
  });

  it('bench:settle-encoding marks every claimed row sent with both encodings and reports each', async () => {
    const { code, stdout, stderr } = await runTsx(['bench/settle-encoding.ts', '--rows', '20', '--runs', '2'], { ...process.env, DATABASE_URL: testDatabaseUrl() });
    assert.equal(code, 0, stderr);
    const rows = stdout.split('\n').filter((l) => /^\| (text|binary) \|/.test(l)).map((l) => l.split('|').map((c) => c.trim()));
    assert.deepEqual(rows.map((r) => r[1]), ['text', 'binary'], stdout);
    const bytes = rows.map((r) => Number(r[4]!.replaceAll(',', '')));
    // Two arrays of 20: in text {"…","…"}, 36 characters and quotes each, commas between; in
    // binary a 20-byte header, then a 4-byte length and 16 bytes each.
    assert.deepEqual(bytes, [2 * (2 + 20 * 38 + 19), 2 * (20 + 20 * 20)], stdout);
  });

  it('bench:latency reports the idle invocations and a latency for every message it wrote', { timeout: 180_000 }, async () => {
    const { code, stdout, stderr } = await runTsx(
      ['bench/latency.ts', '--idle-seconds', '10', '--samples', '1', '--rates', '5', '--load-seconds', '2', '--period', '8'],
      { ...process.env, DATABASE_URL: testDatabaseUrl() },
    );
    assert.equal(code, 0, stderr);
    const lines = stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown> & { phase: string });
    assert.deepEqual(
      lines.map((l) => l.phase),
      ['idle', 'idle', 'first message after 5-6 s idle', 'light load'],
    );
    const [shipped, fixed] = lines as unknown as Array<{ transactions: number; claims: number }>;
    assert.ok(shipped!.claims > 0 && shipped!.transactions >= shipped!.claims, JSON.stringify(shipped));
    // 4 s of polling: the idle backoff claims about 8 times, a fixed 100 ms interval about 40.
    assert.ok(shipped!.claims < fixed!.claims, `${shipped!.claims} claims with the backoff, ${fixed!.claims} at a fixed interval`);
    assert.equal(lines[2]!.count, 1);
    const load = lines[3] as unknown as Record<'all' | 'whilePolling' | 'betweenInvocations', { count: number; p50Ms: number; p99Ms: number; maxMs: number }>;
    assert.equal(load.all.count, 10, 'every message written at 5 msg/s for 2 s has a latency');
    assert.equal(load.whilePolling.count + load.betweenInvocations.count, 10);
    assert.ok(load.all.p50Ms <= load.all.p99Ms && load.all.p99Ms <= load.all.maxMs, JSON.stringify(load.all));
    assert.match(stdout, /\| commit → publish \| messages \| p50 ms \| p99 ms \| max ms \|/, 'the readable table follows the JSON lines');
  });
});
