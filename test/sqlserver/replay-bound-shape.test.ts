/**
 * The SQL Server bounded replay (`ReplayFilter.maxRows`), checked without a server: one
 * transaction that moves at most `max + 1` matching rows and rolls the move back when more than
 * `max` moved; no count under range locks before it (it would lock every row it read, the whole
 * table for a filter that scans); values bound, never in the text.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildOutboxReplayBounded } from '../../lib/db/sqlserver/outbox-queries.ts';
import { names, SENTINELS } from './statement-shapes.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

describe('SQL Server bounded replay shape', () => {
  const statement = buildOutboxReplayBounded(names, { topics: [SENTINELS.topic], states: ['dead'], createdFrom: new Date(0) }, 100);

  it('moves at most max + 1 rows in one transaction, and keeps the move only within the bound', () => {
    const text = statement.text;
    assert.match(text, /^SET XACT_ABORT ON;\nDECLARE @v_matched INT;\nDECLARE @v_replayed INT = 0;\nBEGIN TRANSACTION;\nUPDATE TOP \(@p_max \+ 1\) \[dbo\]\.\[outbox\] WITH \(ROWLOCK\)/);
    assert.match(text, /;\nSET @v_matched = @@ROWCOUNT;\nIF @v_matched > @p_max\nBEGIN\n  ROLLBACK TRANSACTION;\nEND\nELSE\nBEGIN\n  SET @v_replayed = @v_matched;\n  COMMIT TRANSACTION;\nEND;\nSELECT @v_matched AS matched, @v_replayed AS replayed;$/);
    assert.doesNotMatch(text, /HOLDLOCK|UPDLOCK|SERIALIZABLE/, 'no range lock on the rows it reads');
    assert.equal(text.match(/WHERE state IN \(SELECT value FROM OPENJSON\(@p_states\)/g)?.length, 1, 'one statement reads the table');
  });

  it('binds every value', () => {
    assert.ok(!statement.text.includes(SENTINELS.topic));
    assert.deepEqual(statement.params.map((p) => p.name).sort(), ['p_created_from', 'p_max', 'p_states', 'p_topics']);
  });
});
