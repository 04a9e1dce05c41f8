/**
 * The SQL Server statements' shapes, checked without a server: claim locks and hints, the fence,
 * the database clock, parameters distinct from declared variables, values only as parameters,
 * and migrations that set QUOTED_IDENTIFIER where they create filtered indexes.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pgNames } from '../../lib/db/postgres/names.ts';
import { pgExpectedColumns, pgMigrations } from '../../lib/db/postgres/migrations.ts';
import { MIGRATE_LOCK_SQL, migrationsTableSql, mssqlExpectedColumns, mssqlMigrations } from '../../lib/db/sqlserver/migrations.ts';
import { buildInboxInsert } from '../../lib/db/sqlserver/inbox-queries.ts';
import { buildOutboxInsert } from '../../lib/db/sqlserver/outbox-queries.ts';
import { allStatements, fencedStatements, names, SENTINELS } from './statement-shapes.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

/** Named arguments of system procedures (not variables). */
const PROC_ARGUMENTS = new Set(['@Resource', '@LockMode', '@LockOwner', '@LockTimeout']);


describe('SQL Server statement shapes', () => {
  it('every fenced write matches id, processing, token and a live lease, and reports rows via OUTPUT … INTO a table variable, then SELECT', () => {
    const fenced = fencedStatements();
    assert.equal(Object.keys(fenced).length, 18);
    for (const [name, { text }] of Object.entries(fenced)) {
      assert.match(text, /r\.id = s\.id/, name);
      assert.match(text, /r\.state = N'processing'/, name);
      assert.match(text, /r\.claim_token = s\.token/, name);
      assert.match(text, /r\.lease_expires_at > SYSUTCDATETIME\(\)/, name);
      assert.match(text, /^DECLARE @v_changed TABLE \(id UNIQUEIDENTIFIER NOT NULL\);\nUPDATE r\n/, name);
      assert.match(text, /\nOUTPUT inserted\.id INTO @v_changed \(id\)\n/, name);
      assert.match(text, /;\nSELECT id FROM @v_changed;$/, name);
      assert.match(text, /OPENJSON\(@p_items\) WITH \(id UNIQUEIDENTIFIER '\$\.id', token UNIQUEIDENTIFIER '\$\.token'/, name);
      if (name.startsWith('pull')) assert.match(text, /r\.consumption = N'pull'/, name);
    }
  });

  it('a batch settles in one statement whatever its size: the items travel in one JSON parameter', () => {
    const fenced = fencedStatements();
    assert.equal(fenced['outbox sent']!.text, fenced['inbox sent']!.text.replace(names.inbox, names.outbox));
    const items = JSON.parse(fenced['outbox retry']!.params.find((p) => p.name === 'p_items')!.value as string) as unknown[];
    assert.equal(items.length, 2);
  });

  it('uses only the database UTC clock: SYSUTCDATETIME(), never GETDATE() or another local clock', () => {
    const texts = [...Object.entries(allStatements()).map(([n, st]) => [n, st.text] as const), ...mssqlMigrations.flatMap((m) => m.statements(names).map((t, i) => [`migration ${m.version}.${i}`, t] as const))];
    for (const [name, text] of texts) {
      assert.doesNotMatch(text, /\b(GETDATE|GETUTCDATE|SYSDATETIME|SYSDATETIMEOFFSET|CURRENT_TIMESTAMP)\b/i, name);
    }
    for (const name of ['outbox claim', 'outbox reclaim', 'inbox claim push', 'pull claim', 'outbox stats', 'reclaim gate', 'pass record finished', 'pass list finished']) {
      assert.match(allStatements()[name]!.text, /SYSUTCDATETIME\(\)/, name);
    }
  });

  it('declares only @v_ variables, binds only @p_ parameters, and never gives both the same name', () => {
    for (const [name, statement] of Object.entries(allStatements())) {
      const declared = new Set([...statement.text.matchAll(/DECLARE\s+(@\w+)/g)].map((m) => m[1]!));
      const bound = new Set(statement.params.map((p) => `@${p.name}`));
      assert.equal(bound.size, statement.params.length, `${name}: a parameter bound twice`);
      for (const v of declared) assert.match(v, /^@v_/, name);
      for (const p of bound) {
        assert.match(p, /^@p_/, name);
        assert.ok(!declared.has(p), `${name}: ${p} is both declared and bound`);
        assert.ok(statement.text.includes(p), `${name}: ${p} is bound but unused`);
      }
      for (const [used] of statement.text.matchAll(/(?<!@)@\w+/g)) {
        assert.ok(declared.has(used) || bound.has(used) || PROC_ARGUMENTS.has(used), `${name}: ${used} is neither declared nor bound`);
      }
    }
  });

  it('carries every value as a parameter: no sentinel value appears in any SQL text', () => {
    const values = Object.values(SENTINELS).map(String);
    for (const [name, statement] of Object.entries(allStatements())) {
      for (const value of values) assert.ok(!statement.text.includes(value), `${name} contains the value ${value}`);
    }
    const insert = allStatements()['outbox insert']!;
    assert.ok(insert.params.some((p) => p.value === SENTINELS.topic));
    assert.ok(insert.params.some((p) => typeof p.value === 'string' && p.value.includes(SENTINELS.payload)));
  });

  it('the gauge gate answers the time it set and the time it held as style-121 text (every digit of DATETIME2(7)); giving the turn back moves the row only while it still holds that time', () => {
    const all = allStatements();
    const gate = all['gauge gate']!.text;
    assert.match(gate, /SET @v_previous = last_run_at, last_run_at = @v_taken/);
    assert.match(gate, /CONVERT\(VARCHAR\(27\), @v_taken, 121\) AS taken, CONVERT\(VARCHAR\(27\), @v_previous, 121\) AS previous;$/);
    for (const name of ['gauge gate give back', 'gauge gate give back (new row)']) {
      const { text, params } = all[name]!;
      assert.match(text, /^IF @p_previous IS NULL\n  DELETE FROM \S+ WHERE name = @p_gate_name AND last_run_at = CONVERT\(DATETIME2\(7\), @p_taken, 121\);\nELSE\n/, name);
      assert.match(text, /UPDATE \S+ SET last_run_at = CONVERT\(DATETIME2\(7\), @p_previous, 121\)\n   WHERE name = @p_gate_name AND last_run_at = CONVERT\(DATETIME2\(7\), @p_taken, 121\);$/, name);
      assert.equal(params.find((p) => p.name === 'p_taken')!.value, '2026-12-05 10:00:00.1234567', name);
    }
    assert.equal(all['gauge gate give back (new row)']!.params.find((p) => p.name === 'p_previous')!.value, null);
  });

  it('a finished pass stamps its worker\'s maintenance row: inserted under UPDLOCK, HOLDLOCK when missing, else updated; the list reads the three workers\' rows with their age on the database clock', () => {
    const record = allStatements()['pass record finished']!;
    assert.equal(
      record.text,
      `INSERT INTO ${names.maintenance} (name, last_run_at)
SELECT @p_pass_name, SYSUTCDATETIME()
 WHERE NOT EXISTS (SELECT 1 FROM ${names.maintenance} WITH (UPDLOCK, HOLDLOCK) WHERE name = @p_pass_name);
IF @@ROWCOUNT = 0
  UPDATE ${names.maintenance} SET last_run_at = SYSUTCDATETIME() WHERE name = @p_pass_name;`,
    );
    assert.deepEqual(record.params.map((p) => [p.name, p.value]), [['p_pass_name', 'pass:inboxRelay:outbox']]);
    const list = allStatements()['pass list finished']!;
    assert.match(list.text, /^SELECT name, last_run_at, DATEDIFF_BIG\(millisecond, last_run_at, SYSUTCDATETIME\(\)\) AS age_ms\s+FROM \[dbo\]\.\[queuebox_maintenance\]\s+WHERE name IN \(@p_pass_name_0, @p_pass_name_1, @p_pass_name_2\);$/);
    assert.deepEqual(list.params.map((p) => p.value), ['pass:outboxPoller:outbox', 'pass:inboxRelay:outbox', 'pass:reclaim:outbox']);
    for (const p of [...record.params, ...list.params]) assert.equal((p.type as unknown as { length: number }).length, 255, 'NVARCHAR(255), the name column');
  });

  it('migrations set QUOTED_IDENTIFIER and the ANSI options in every batch that creates a filtered index', () => {
    const isFiltered = (t: string) => /CREATE\s+INDEX[^;]*\bWHERE\b/.test(t);
    const firstFour = mssqlMigrations.filter((m) => m.version <= 4).flatMap((m) => m.statements(names)).filter(isFiltered);
    const pgPartial = pgMigrations
      .filter((m) => m.version <= 4)
      .flatMap((m) => m.sql(pgNames('public', { outbox: 'outbox', inbox: 'inbox', maintenance: 'queuebox_maintenance' })).split(';'))
      .filter((t) => /CREATE INDEX[^;]*\bWHERE\b/.test(t));
    assert.equal(firstFour.length, pgPartial.length, 'migrations 1-4: one filtered index per PostgreSQL partial index');
    for (const text of mssqlMigrations.flatMap((m) => m.statements(names)).filter(isFiltered)) {
      assert.match(text, /^SET ANSI_NULLS ON;.*SET QUOTED_IDENTIFIER ON;.*SET NUMERIC_ROUNDABORT OFF;/, text);
      assert.match(text, /IF NOT EXISTS \(SELECT 1 FROM sys\.indexes/, 'each index is created once');
    }
  });

  it('migrations create the PostgreSQL columns with SQL Server types, bracketed [key], a SEQUENCE default and the constraints', () => {
    const all = mssqlMigrations.flatMap((m) => m.statements(names)).join('\n');
    assert.match(all, /\[key\] NVARCHAR\(255\) NULL/);
    assert.match(all, /\[sequence\] BIGINT NOT NULL DEFAULT \(NEXT VALUE FOR \[dbo\]\.\[outbox_sequence_seq\]\)/);
    assert.match(all, /id UNIQUEIDENTIFIER NOT NULL DEFAULT NEWID\(\)/);
    assert.match(all, /payload NVARCHAR\(MAX\) NOT NULL/);
    assert.match(all, /CHECK \(ISJSON\(headers\) = 1/);
    assert.match(all, /scheduled_at DATETIME2\(7\) NOT NULL DEFAULT SYSUTCDATETIME\(\)/);
    assert.match(all, /UNIQUE \(source, idempotency_key\)/);
    assert.match(all, /CHECK \(state IN \(N'pending', N'processing', N'sent', N'dead'\)\)/);
    assert.match(all, /CHECK \(state IN \(N'pending', N'processing', N'processed', N'dead'\)\)/);
    const pg = pgExpectedColumns(pgNames('public', { outbox: 'outbox', inbox: 'inbox', maintenance: 'queuebox_maintenance' }));
    const ms = mssqlExpectedColumns(names);
    const sqlServerOnly = new Set(['source_bytes', 'idempotency_key_bytes']);
    // `key_first` marks the first row of a key in a claim of several rows of that key
    // (`outbox.rowsPerKey` above 1), which SQL Server does not support: its claims hold one row
    // of a key, and its in-flight index covers every `processing` row.
    const postgresOnly = new Set(['key_first']);
    assert.deepEqual(
      ms.map((t) => t.columns.map((c) => c.name).filter((c) => !sqlServerOnly.has(c))),
      pg.map((t) => t.columns.map((c) => c.name).filter((c) => !postgresOnly.has(c))),
      'the same columns as PostgreSQL (but key_first), plus the byte lengths of the deduplication key',
    );
    for (const table of ms) for (const column of table.columns) assert.ok(all.includes(['key', 'sequence', 'source_bytes', 'idempotency_key_bytes'].includes(column.name) ? `[${column.name}]` : `${column.name} `), column.name);
  });

  it('migration 7 adds a nullable bounded trace_context to both tables (guarded); the inserts bind it and the relay and outbox claims return it', () => {
    const seven = mssqlMigrations.find((m) => m.version === 7)!;
    assert.equal(seven.name, 'trace context of a row');
    assert.deepEqual(seven.statements(names), [
      `IF COL_LENGTH(N'[dbo].[outbox]', N'trace_context') IS NULL\n  ALTER TABLE [dbo].[outbox] ADD trace_context NVARCHAR(1024) NULL;`,
      `IF COL_LENGTH(N'[dbo].[inbox]', N'trace_context') IS NULL\n  ALTER TABLE [dbo].[inbox] ADD trace_context NVARCHAR(1024) NULL;`,
    ]);
    const trace = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' };
    const outbox = buildOutboxInsert(names, { topic: 't', payload: {}, trace }, { maxAttempts: 5 }).statement;
    assert.match(outbox.text, /max_attempts, scheduled_at, trace_context\)/);
    assert.equal(outbox.params.find((p) => p.name === 'p_trace_context')?.value, JSON.stringify(trace));
    const inbox = buildInboxInsert(names, { source: 's', idempotencyKey: 'k', payload: {}, consumption: 'push', trace }, '11111111-2222-4333-8444-555555555555');
    assert.equal(inbox.params.find((p) => p.name === 'p_trace_context')?.value, JSON.stringify(trace));
    assert.equal(buildOutboxInsert(names, { topic: 't', payload: {} }, { maxAttempts: 5 }).statement.params.find((p) => p.name === 'p_trace_context')?.value, null);
    const statements = allStatements();
    for (const claim of ['outbox claim', 'inbox claim push']) assert.match(statements[claim]!.text, /inserted\.trace_context/, claim);
  });

  it('migrate runs under the transaction-owned applock queuebox_migrate and creates its migrations table', () => {
    assert.match(MIGRATE_LOCK_SQL, /sp_getapplock @Resource = N'queuebox_migrate', @LockMode = N'Exclusive', @LockOwner = N'Transaction'/);
    assert.match(MIGRATE_LOCK_SQL, /IF @v_lock_result < 0\s+THROW/);
    assert.match(migrationsTableSql(names).join('\n'), /CREATE TABLE \[dbo\]\.\[queuebox_migrations\]/);
  });
});
