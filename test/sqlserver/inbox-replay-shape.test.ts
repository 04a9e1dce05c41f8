/**
 * The SQL Server inbox requeue, checked without a server: dead rows only, moved in autocommitted
 * chunks in `[sequence]` order (unbounded) or in one transaction under update locks held to its
 * end (bounded); `id` and `[sequence]` never written; values bound, never in the text.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildInboxReplay, buildInboxReplayBounded, inboxReplayConditions } from '../../lib/db/sqlserver/inbox-replay.ts';
import { UsageError } from '../../lib/errors.ts';
import { allStatements, names, SENTINELS } from './statement-shapes.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

describe('SQL Server inbox requeue shape', () => {
  it('moves dead rows only, in chunks of 500 in sequence order, keeping id and sequence', () => {
    const text = allStatements()['inbox replay']!.text;
    assert.match(text, /SELECT TOP \(500\) \* FROM \[dbo\]\.\[inbox\] WITH \(ROWLOCK, FORCESEEK \(\[inbox_pkey\] \(id\)\)\)\s+WHERE state = N'dead'/);
    assert.match(text, /AND \[sequence\] > @v_after\s+ORDER BY \[sequence\]\)/);
    assert.match(text, /SET state = N'pending', attempt = 0, scheduled_at = SYSUTCDATETIME\(\), last_error = NULL,\s+claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL, processed_at = NULL/);
    assert.doesNotMatch(text, /SET[^;]*\b(id|\[sequence\]) =/, 'id and sequence are kept');
    assert.match(text, /consumption = @p_consumption/);
  });

  it('the bounded requeue moves at most max + 1 rows in one transaction, and keeps the move only within the bound', () => {
    const text = buildInboxReplayBounded(names, { sources: [SENTINELS.source] }, 100).text;
    assert.match(text, /^SET XACT_ABORT ON;\nDECLARE @v_matched INT;\nDECLARE @v_replayed INT = 0;\nBEGIN TRANSACTION;\nUPDATE TOP \(@p_max \+ 1\) \[dbo\]\.\[inbox\] WITH \(ROWLOCK\)/);
    assert.match(text, /SET @v_matched = @@ROWCOUNT;\nIF @v_matched > @p_max\nBEGIN\n  ROLLBACK TRANSACTION;/);
    assert.doesNotMatch(text, /HOLDLOCK|UPDLOCK/, 'no range lock on the rows it reads');
    assert.equal(text.match(/WHERE state = N'dead'/g)?.length, 1, 'one statement reads the table');
  });

  it('binds every value, the last error prefix compared binary and length-exact', () => {
    for (const name of ['inbox replay', 'inbox replay bounded', 'inbox replay preview']) {
      const statement = allStatements()[name]!;
      for (const value of [SENTINELS.source, SENTINELS.error, SENTINELS.id]) assert.ok(!statement.text.includes(value), `${name}: ${value} in the text`);
      assert.match(statement.text, /DATALENGTH\(last_error\) >= DATALENGTH\(@p_last_error_prefix\)/, name);
      assert.match(statement.text, /COLLATE Latin1_General_100_BIN2 = @p_last_error_prefix/, name);
    }
    assert.deepEqual(buildInboxReplay(names, { ids: [SENTINELS.id] }).params.map((p) => p.name), ['p_ids']);
  });

  it('refuses an empty filter (consumption alone narrows, it is no filter) and an empty as-read list', () => {
    assert.throws(() => inboxReplayConditions({}), UsageError);
    assert.throws(() => inboxReplayConditions({ consumption: 'push' }), UsageError);
    assert.throws(() => inboxReplayConditions({ ids: [SENTINELS.id], asRead: [] }), UsageError);
    assert.throws(() => inboxReplayConditions({ lastErrorPrefix: '' }), UsageError);
  });
});
