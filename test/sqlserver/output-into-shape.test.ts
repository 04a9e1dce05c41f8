/**
 * No statement the SQL Server driver builds has an `OUTPUT` without `INTO`: such a statement
 * fails (error 334) once an application adds an enabled trigger for its action to the table (see
 * "Triggers" in "OUTPUT clause (Transact-SQL)",
 * learn.microsoft.com/sql/t-sql/queries/output-clause-transact-sql). Every `OUTPUT` writes into a
 * table variable declared in the same batch, which the batch then selects. Checked without a server.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sqlServerCallerOutboxInsert, sqlServerCallerPullComplete } from '../../lib/db/sqlserver/caller-statements.ts';
import { buildBlockedHeads, buildClaimsInFlight, buildDeadGroups, buildDeadSearch, buildRowGet, buildStatsByState } from '../../lib/db/sqlserver/console-queries.ts';
import { buildDeleteFinished } from '../../lib/db/sqlserver/maintenance-queries.ts';
import { MIGRATE_LOCK_SQL, migrationsTableSql, mssqlMigrations } from '../../lib/db/sqlserver/migrations.ts';
import { buildOutboxReplayBounded } from '../../lib/db/sqlserver/outbox-queries.ts';
import { allStatements, names, SENTINELS } from './statement-shapes.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

const s = SENTINELS;

/** Every statement text the driver builds, by name: the shape tests' statements, the console's reads, the caller statements, the migrations. */
function allTexts(): Array<[string, string]> {
  const blocked = { limit: 50, scanLimit: 500, poisonAttempts: 3, waitingCap: 1000 };
  const dead = { label: s.topic, from: new Date(0), to: new Date(), limit: 25, scanLimit: 10_000 };
  const consoleReads = {
    'outbox stats by state': buildStatsByState(names, 'outbox', 100_000),
    'inbox claims in flight': buildClaimsInFlight(names, 'inbox', 20),
    'outbox blocked keys': buildBlockedHeads(names, 'outbox', blocked),
    'inbox blocked aggregates': buildBlockedHeads(names, 'inbox', blocked),
    'outbox dead search': buildDeadSearch(names, 'outbox', dead),
    'inbox dead groups': buildDeadGroups(names, 'inbox', { scanLimit: 10_000, limit: 50, errorChars: 120 }),
    'outbox row get': buildRowGet(names, 'outbox', s.id),
  };
  return [
    ...Object.entries(allStatements()).map(([n, st]) => [n, st.text] as [string, string]),
    ...Object.entries(consoleReads).map(([n, st]) => [n, st.text] as [string, string]),
    ['outbox replay bounded', buildOutboxReplayBounded(names, { ids: [s.id], topics: [s.topic] }, 100).text],
    ['delete finished', buildDeleteFinished(names.outbox, 'sent', 'updated_at', s.limit, 1000).text],
    ['enqueue through a data-layer library', sqlServerCallerOutboxInsert(names, { id: s.id, topic: s.topic, key: s.key, payload: {} }, { maxAttempts: 5 }).statement.text],
    ['pull complete through a data-layer library', sqlServerCallerPullComplete(names, { id: s.id, token: s.token }).text],
    ['migrate lock', MIGRATE_LOCK_SQL],
    ...migrationsTableSql(names).map((t, i) => [`migrations table ${i}`, t] as [string, string]),
    ...mssqlMigrations.flatMap((m) => m.statements(names).map((t, i) => [`migration ${m.version}.${i}`, t] as [string, string])),
  ];
}

/** The `OUTPUT` clauses of `text` (up to the end of their statement) that write into no table variable declared in the text. */
function outputsWithoutInto(text: string): string[] {
  const declared = new Set([...text.matchAll(/DECLARE\s+(@v_\w+)\s+TABLE\b/g)].map((m) => m[1]!));
  return [...text.matchAll(/\bOUTPUT\b[^;]*/g)]
    .map((m) => m[0])
    .filter((clause) => {
      const into = /\bINTO\s+(@v_\w+)/.exec(clause);
      return into === null || !declared.has(into[1]!);
    });
}

describe('SQL Server OUTPUT clauses (shape)', () => {
  it('the check finds an OUTPUT without INTO, and one INTO a table variable not declared in the batch', () => {
    assert.equal(outputsWithoutInto('UPDATE r SET a = 1\nOUTPUT inserted.id\nFROM t AS r;').length, 1);
    assert.equal(outputsWithoutInto('UPDATE r SET a = 1\nOUTPUT inserted.id INTO @v_x (id)\nFROM t AS r;').length, 1);
    assert.equal(outputsWithoutInto('DECLARE @v_x TABLE (id INT);\nUPDATE r SET a = 1\nOUTPUT inserted.id INTO @v_x (id)\nFROM t AS r;\nSELECT id FROM @v_x;').length, 0);
  });

  it('no statement the driver builds has an OUTPUT without INTO a table variable declared in its batch, and each such variable is selected', () => {
    const texts = allTexts();
    assert.ok(texts.length > 60, `${texts.length} statements`);
    let outputs = 0;
    for (const [name, text] of texts) {
      assert.deepEqual(outputsWithoutInto(text), [], name);
      for (const [, into] of text.matchAll(/\bOUTPUT\b[^;]*\bINTO\s+(@v_\w+)/g)) assert.match(text, new RegExp(`\\bFROM ${into}\\b`), `${name}: ${into} is read back`);
      outputs += text.match(/\bOUTPUT\b/g)?.length ?? 0;
    }
    // the fenced writes (18), the claims (3), the reclaims, the replays and the caller statements
    assert.ok(outputs >= 25, `${outputs} OUTPUT clauses checked`);
  });

  it('the enqueue and pull complete of a data-layer library return the same rows as before: the id, lower-case, selected from the table variable', () => {
    const insert = sqlServerCallerOutboxInsert(names, { id: s.id.toUpperCase(), topic: s.topic, payload: {} }, { maxAttempts: 5 });
    assert.equal(insert.id, s.id);
    assert.match(insert.statement.text, /^DECLARE @v_inserted TABLE \(id NVARCHAR\(36\) NOT NULL\);\nINSERT INTO \[dbo\]\.\[outbox\] /);
    assert.match(insert.statement.text, /\nOUTPUT LOWER\(CONVERT\(NVARCHAR\(36\), inserted\.id\)\) INTO @v_inserted \(id\)\nVALUES /);
    assert.match(insert.statement.text, /;\nSELECT id FROM @v_inserted;$/);
    const complete = sqlServerCallerPullComplete(names, { id: s.id, token: s.token }).text;
    assert.match(complete, /^DECLARE @v_changed TABLE \(id UNIQUEIDENTIFIER NOT NULL\);\nUPDATE r SET state = N'processed'/);
    assert.match(complete, /\nOUTPUT inserted\.id INTO @v_changed \(id\)\nFROM \[dbo\]\.\[inbox\] AS r\n/);
    assert.match(complete, /;\nSELECT id FROM @v_changed;$/);
  });
});
