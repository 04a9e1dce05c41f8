import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { waitUntil } from '../helpers/wait.ts';

const CHILD = fileURLToPath(new URL('./freeze-child.ts', import.meta.url));

/** True once `pid` is stopped (`T` in /proc/<pid>/stat). */
function isStopped(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('T');
  } catch {
    return false;
  }
}

/**
 * Nothing of an invocation outlives it. Lambda freezes a container the moment its handler's
 * promise settles; a statement the handler did not await is frozen with it, and a transaction cut
 * between two of its round trips keeps its locks. Here a real poller handler runs in a child
 * process that stops itself (`SIGSTOP`) as soon as its handler resolves, with a lease renewal
 * stuck behind a row lock (held by this test) at that moment; once the child is stopped the lock
 * is released, so a renewal still in flight would take the rows' locks and never commit.
 */
describe('outbox poller: a container frozen right after its handler returns leaves nothing behind', () => {
  let db: TestDatabase;
  let child: ChildProcess | undefined;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], pollIntervalMs: 10 },
    });
  });
  after(async () => {
    child?.kill('SIGKILL');
    await db.drop();
  });

  it('holds no transaction and no lock while frozen; a fresh poller delivers other keys at once and a forced reclaim does not block', { timeout: 120_000 }, async () => {
    const frozenIds = await insertOutboxRows(db, ['a', 'b', 'c'].map((key) => ({ topic: 'orders.slow', key, payload: { key } })));
    // Lease 3 s (renewed every second); the pass stops claiming at 3.5 s (6 s − 2.5 s margin).
    child = spawn(process.execPath, ['--import', 'tsx', CHILD], {
      env: { ...process.env, FREEZE_SCHEMA: db.schema, FREEZE_TIMEOUT_MS: '6000', FREEZE_CLAIM_TIMEOUT_MS: '3000' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const processing = async () => Number((await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE state = 'processing'`))[0]!.n);
    await waitUntil('the child claimed its rows', async () => (await processing()) === 3, 60_000);

    // The first renewal (one second after the claim) queues behind this lock.
    const holder = await db.pool.connect();
    await holder.query('BEGIN');
    await holder.query(`SELECT id FROM "${db.schema}".outbox WHERE id = $1 FOR UPDATE`, [frozenIds[0]]);
    await waitUntil('the child froze after its handler returned', () => isStopped(child!.pid!), 60_000);
    await holder.query('COMMIT');
    holder.release();

    const report = JSON.parse(output.trim().split('\n').at(-1)!) as { summary?: { claimed: number }; error?: string; pids: number[] };
    assert.equal(report.error, undefined, 'the handler resolved');
    assert.equal(report.summary?.claimed, 3);
    // Whatever the released lock let through has had time to run, or to wait for a COMMIT that a
    // frozen process never sends.
    await waitUntil('no statement of the child is running', async () => {
      const rows = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ANY($1) AND state = 'active'`, [report.pids]);
      return rows[0]!.n === 0;
    });
    const sessions = await db.query<{ pid: number; state: string; query: string }>(`SELECT pid, state, query FROM pg_stat_activity WHERE pid = ANY($1)`, [report.pids]);
    assert.deepEqual(sessions.filter((s) => s.state !== 'idle'), [], 'every connection of the frozen container is idle: no transaction open');
    const locks = await db.query<{ pid: number; locktype: string; mode: string }>(`SELECT pid, locktype, mode FROM pg_locks WHERE pid = ANY($1)`, [report.pids]);
    assert.deepEqual(locks, [], 'the frozen container holds no lock');

    // A fresh poller (another driver) delivers other keys' rows at once; its reclaim step returns
    // the frozen invocation's rows (their lease is over) and does not wait.
    const fresh = await insertOutboxRows(db, Array.from({ length: 20 }, (_, i) => ({ topic: 'orders.paid', key: `other-${i}`, payload: { i } })));
    const destination = new RecordingDestination();
    const options = passFixture(db, { destinations: [destination], driver: db.newDriver(), timeoutMs: 20_000, outbox: { claimTimeoutMs: 3000 } });
    const summary = await runOutboxPass(options);
    assert.equal(summary.stoppedBecause, 'drained');
    assert.deepEqual(fresh.filter((id) => !destination.deliveries.some((d) => d.id === id)), [], 'every fresh row of another key was delivered');
    // A forced reclaim (no throttle), bounded so that a blocked one fails instead of hanging.
    const reclaim = await withStatementBudget(() => 5000, () => db.driver.outboxReclaimExpired({}));
    assert.equal(reclaim.ran, true);
  });
});
