import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runFaults } from './fault-run.ts';
import { formatFaultTable } from './format-fault-table.ts';

const seed = Number(process.env.QUEUEBOX_FAULTS_SEED || 11);

// `outbox.rowsPerKey` 1: one row per key per claim; unset: the default (10 on PostgreSQL), a
// claim holds up to ten rows of a key.
for (const rowsPerKey of [1, undefined]) describe(`outbox, inbox relay and pull workers under faults (bounded run, outbox.rowsPerKey ${rowsPerKey ?? 'default (10)'})`, () => {
  it('lose nothing, keep order, account for every duplicate and relay each inbox row exactly once while every fault kind is injected', { timeout: 170_000 }, async () => {
    const result = await runFaults({ seed, messages: 5000, maxRunMs: 150_000, ...(rowsPerKey === undefined ? {} : { rowsPerKey }) });
    const table = formatFaultTable(result);
    console.log(table);
    assert.equal(result.report.violationCount, 0, `violations (seed ${seed}):\n${table}`);
    assert.equal(result.messages, 5000);
    assert.equal(result.report.stats.deliveries >= result.report.stats.sent, true);
    for (const kind of [
      'invocation killed (mid-publish / mid-transaction)',
      'invocation frozen past its lease',
      'host clock skewed ±3–5 min',
      'invocation with 150 ms statement_timeout',
      'table lock window (statement timeouts)',
      'connection terminated (pg_terminate_backend)',
      'database restart (emulated: all backends terminated for 1.2 s)',
      'destination throttled',
      'destination timeout',
      'destination partial batch',
      'destination poison (permanent, dead now)',
      'pull handler error',
    ]) {
      assert.ok((result.faults[kind] ?? 0) > 0, `fault kind "${kind}" was never injected (seed ${seed})`);
    }
  });
});
