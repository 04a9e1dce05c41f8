/**
 * The SQL Server statements of scale-out, checked without a server: the slot rows are taken
 * under UPDLOCK, HOLDLOCK (insert when missing) or by an update that re-checks the expiry, every
 * slot write compares the token, and the backlog count stops at its limit. (The generic checks —
 * database clock, parameters, no values in text — cover them through `allStatements`.)
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { allStatements, names } from './statement-shapes.ts';

const TOKEN = `CAST(DATEDIFF_BIG(microsecond, CAST('1970-01-01' AS DATETIME2(7)), last_run_at) AS NVARCHAR(20))`;

describe('SQL Server scale-out statement shapes', () => {
  it('acquire counts the held slots by prefix, inserts a missing slot under UPDLOCK, HOLDLOCK, takes an expired one by a re-checked update, and returns name and token', () => {
    const { text, params } = allStatements()['scale-out acquire']!;
    assert.match(text, /WHERE LEFT\(name, LEN\(@p_prefix\)\) = @p_prefix AND last_run_at > SYSUTCDATETIME\(\)/);
    assert.match(text, /WHILE @v_n <= @p_slots AND \(SELECT COUNT\(\*\) FROM @v_taken\) < @v_need/);
    assert.match(text, new RegExp(`WHERE NOT EXISTS \\(SELECT 1 FROM ${names.maintenance.replace(/[[\].]/g, '\\$&')} WITH \\(UPDLOCK, HOLDLOCK\\) WHERE name = @v_name\\)`));
    assert.match(text, /UPDATE \[dbo\]\.\[queuebox_maintenance\] WITH \(UPDLOCK, HOLDLOCK\)[\s\S]*WHERE name = @v_name AND last_run_at <= SYSUTCDATETIME\(\);/);
    assert.ok(text.endsWith(`SELECT name, ${TOKEN} AS token FROM @v_taken;`));
    assert.deepEqual(params.map((p) => p.name), ['p_prefix', 'p_slots', 'p_want', 'p_lease_ms']);
    assert.deepEqual(params.slice(0, 3).map((p) => p.value), ['scale-out:outboxPoller:outbox:', 3, 2]);
  });

  it('start and release act only on the slot that still holds the token; start also needs a live lease', () => {
    const start = allStatements()['scale-out start']!;
    assert.match(start.text, new RegExp(`WHERE name = @p_slot_name AND last_run_at > SYSUTCDATETIME\\(\\) AND ${TOKEN.replace(/[()[\]*.]/g, '\\$&')} = @p_token;\n`));
    assert.match(start.text, /OUTPUT inserted\.last_run_at INTO @v_started \(last_run_at\)/);
    assert.ok(start.text.endsWith(`SELECT ${TOKEN} AS token FROM @v_started;`), 'the new token, read back from the table variable');
    assert.deepEqual(start.params.slice(0, 2).map((p) => p.value), ['scale-out:outboxPoller:outbox:2', '1764504000123456']);
    const release = allStatements()['scale-out release']!;
    assert.match(release.text, new RegExp(`^DELETE FROM \\[dbo\\]\\.\\[queuebox_maintenance\\] WHERE name = @p_slot_name AND ${TOKEN.replace(/[()[\]*.]/g, '\\$&')} = @p_token;`));
    assert.deepEqual(release.params.map((p) => p.value), ['scale-out:inboxRelay:outbox:2', '1764504000123456']);
  });

  it('the backlog count reads due pending rows up to its limit (the relay: push rows)', () => {
    assert.match(allStatements()['outbox count due']!.text, /SELECT TOP \(@p_limit\) 1 AS one FROM \[dbo\]\.\[outbox\] WHERE state = N'pending' AND scheduled_at <= SYSUTCDATETIME\(\)/);
    assert.match(allStatements()['inbox count due']!.text, /FROM \[dbo\]\.\[inbox\] WHERE state = N'pending' AND consumption = N'push' AND scheduled_at <= SYSUTCDATETIME\(\)/);
  });
});
