/**
 * The SQL Server bounded replay (`ReplayFilter.maxRows`), checked without a server: one
 * transaction that counts at most `max + 1` matching rows under update locks held to its end and
 * moves them only when no more than `max` match; values bound, never in the text.
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

  it('counts under locks held to the end of one transaction and moves only within the bound', () => {
    const text = statement.text;
    assert.match(text, /^SET XACT_ABORT ON;\nBEGIN TRANSACTION;/);
    assert.match(text, /SELECT TOP \(@p_max \+ 1\) 1 AS x FROM \[dbo\]\.\[outbox\] WITH \(UPDLOCK, ROWLOCK, HOLDLOCK\)/);
    assert.match(text, /IF @v_matched <= @p_max\s+BEGIN\s+UPDATE TOP \(@p_max\) \[dbo\]\.\[outbox\] WITH \(ROWLOCK\)/);
    assert.match(text, /COMMIT TRANSACTION;\s+SELECT @v_matched AS matched, @v_replayed AS replayed;$/);
    assert.equal(text.match(/WHERE state IN \(SELECT value FROM OPENJSON\(@p_states\)/g)?.length, 2, 'the UPDATE re-applies the filter');
  });

  it('binds every value', () => {
    assert.ok(!statement.text.includes(SENTINELS.topic));
    assert.deepEqual(statement.params.map((p) => p.name).sort(), ['p_created_from', 'p_max', 'p_states', 'p_topics']);
  });
});
