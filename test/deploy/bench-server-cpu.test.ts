/**
 * The bench's server CPU reading (`bench/server-cpu.ts`): the difference of the sums of every
 * `postgres` process's CPU and its reaped children's, so a backend that ends between the two
 * samples — a bench case closes its connections before its drain returns — still counts, through
 * the postmaster that reaped it.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, it } from 'node:test';
import pg from 'pg';
import { cpuSample, postgresSeconds } from '../../bench/server-cpu.ts';
import { testDatabaseUrl } from '../helpers/database.ts';

describe('bench server CPU', () => {
  it('counts a process that ended between the samples through its parent, and one that started in full', () => {
    const before = new Map([
      ['1', 10], // the postmaster (with its reaped children's CPU)
      ['2', 3], // a backend that ends meanwhile, 0.5 s later
      ['3', 1],
    ]);
    const after = new Map([
      ['1', 10 + 3.5], // reaped: the backend's 3.5 s are now the postmaster's
      ['3', 1.25],
      ['4', 0.75], // started meanwhile
    ]);
    assert.equal(postgresSeconds(before, after), 0.5 + 0.25 + 0.75);
    assert.equal(postgresSeconds(after, before), 0, 'never negative');
  });

  const host = new URL(testDatabaseUrl()).hostname;
  const local = ['127.0.0.1', 'localhost', '::1', '[::1]', ''].includes(host);
  it('reads the test server on this machine, and sees the CPU of a backend that did work and ended', { skip: local ? false : `DATABASE_URL names ${host}, not this machine: its CPU cannot be read from /proc` }, async () => {
    const before = cpuSample();
    assert.ok(before.postgres.size > 0, 'the test server runs on this machine');
    const client = new pg.Client({ connectionString: testDatabaseUrl() });
    await client.connect();
    const pid = String((await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
    // Up to 0.8 s of busy server CPU (less on a machine shared with other work), then the backend
    // ends with the connection. What it spent is read from the backend itself before it ends, so
    // the check holds however much of the 0.8 s the machine gave it.
    await client.query(`DO $$ DECLARE t timestamptz := clock_timestamp(); BEGIN WHILE clock_timestamp() < t + interval '800 milliseconds' LOOP END LOOP; END $$`);
    const spent = cpuSample().postgres.get(pid) ?? 0;
    assert.ok(spent >= 0.02, `the backend did work: ${spent} s`);
    await client.end();
    const gone = Date.now() + 10_000;
    while (existsSync(`/proc/${pid}`) && Date.now() < gone) await new Promise((resolve) => setTimeout(resolve, 50));
    assert.ok(!existsSync(`/proc/${pid}`), 'the backend ended');
    const used = postgresSeconds(before.postgres, cpuSample().postgres);
    // The backend's CPU, counted through the postmaster that reaped it (one clock tick of slack).
    assert.ok(used >= spent - 0.01, `the ended backend's ${spent} s of CPU are counted: ${used} s`);
  });
});
