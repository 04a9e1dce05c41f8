/**
 * `npm run bench:scale-out` keeps working (docs/performance.md tells operators to run it): a tiny
 * run, checked for what it reports — one line per pass count, rows sent, a ratio to one pass, the
 * CPU columns — never for how fast.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { testDatabaseUrl } from '../helpers/database.ts';
import { runTsx } from '../helpers/run-tsx.ts';

describe('npm run bench:scale-out', () => {
  it('runs 1 and 2 passes in processes of their own and reports rows/s, the ratio to one pass and the CPU used', { timeout: 300_000 }, async () => {
    const { code, stdout, stderr } = await runTsx(
      ['bench/scale-out.ts', '--rows', '3000', '--seconds', '3', '--passes', '1,2', '--keys', '0', '--publish-ms', '0'],
      { ...process.env, DATABASE_URL: testDatabaseUrl() },
      280_000,
    );
    assert.equal(code, 0, stderr);
    assert.match(stderr, /load average \d/, 'the load of the machine is reported with the numbers');
    const lines = stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { workload: string; passes: number; rowsPerSecond: number; ratioToOnePass: number | null; dbCores: number; machineBusy: number; runs: number[]; drained: boolean });
    assert.deepEqual(lines.map((l) => [l.workload, l.passes]), [['unkeyed', 1], ['unkeyed', 2]]);
    for (const l of lines) {
      assert.ok(l.rowsPerSecond > 0 && l.runs.length === 1, JSON.stringify(l));
      assert.ok(l.dbCores >= 0 && l.machineBusy >= 0 && l.machineBusy <= 1, JSON.stringify(l));
    }
    assert.equal(lines[0]!.ratioToOnePass, 1);
    assert.match(stdout, /\| workload \| passes \| rows\/s \| × 1 pass \|/);
    // 3,000 rows at no destination latency run out long before 3 s: the rate is a lower bound, and says so.
    assert.deepEqual(lines.map((l) => l.drained), [true, true]);
    assert.match(stdout, /\| unkeyed \| 1 \| [\d,]+ \(drained\) \|/);
    assert.match(stderr, /unkeyed, 1 passes: the backlog ran out before the run's end; the rate is a lower bound \(raise --rows\)/);
  });

  it('does not mark a run that left rows behind as drained', { timeout: 300_000 }, async () => {
    // One pass, calls of 100 ms, 8 at a time: about 800 rows/s, far from 20,000 rows in 2 s.
    const { code, stdout, stderr } = await runTsx(
      ['bench/scale-out.ts', '--rows', '20000', '--seconds', '2', '--passes', '1', '--keys', '0', '--publish-ms', '100'],
      { ...process.env, DATABASE_URL: testDatabaseUrl() },
      280_000,
    );
    assert.equal(code, 0, stderr);
    const [line] = stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { drained: boolean; rowsPerSecond: number });
    assert.ok(line!.rowsPerSecond > 0);
    assert.equal(line!.drained, false);
    assert.doesNotMatch(stdout, /\(drained\)/);
  });
});
