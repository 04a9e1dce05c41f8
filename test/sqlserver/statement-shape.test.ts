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
import { allStatements, fencedStatements, names, SENTINELS } from './statement-shapes.ts';

const HINTS = 'WITH (UPDLOCK, READPAST, ROWLOCK)';
/** Named arguments of system procedures (not variables). */
const PROC_ARGUMENTS = new Set(['@Resource', '@LockMode', '@LockOwner', '@LockTimeout']);

function releaseCount(text: string): number {
  return text.split('EXEC sp_releaseapplock').length - 1;
}

describe('SQL Server statement shapes', () => {
  it('the outbox claim holds the session applock queuebox_outbox_claim_outbox (10 s wait) around an UPDLOCK/READPAST/ROWLOCK claim and releases it in TRY/CATCH', () => {
    const text = allStatements()['outbox claim']!.text;
    assert.match(text, /DECLARE @v_lock_resource NVARCHAR\(255\) = N'queuebox_outbox_claim_outbox';/);
    assert.match(text, /sp_getapplock @Resource = @v_lock_resource, @LockMode = N'Exclusive', @LockOwner = N'Session', @LockTimeout = 10000;/);
    assert.match(text, /IF @v_lock_result < 0\s+THROW 51000/);
    assert.ok(text.includes(HINTS));
    assert.match(text, /OUTPUT inserted\.id/);
    const tryAt = text.indexOf('BEGIN TRY');
    const updateAt = text.indexOf('UPDATE o');
    const catchAt = text.indexOf('BEGIN CATCH');
    assert.ok(tryAt > text.indexOf('sp_getapplock') && tryAt < updateAt && updateAt < catchAt, 'lock, then TRY { claim }');
    assert.match(text.slice(catchAt), /EXEC sp_releaseapplock @Resource = @v_lock_resource, @LockOwner = N'Session';\s+THROW;\s+END CATCH;\s+EXEC sp_releaseapplock @Resource = @v_lock_resource, @LockOwner = N'Session';\s*$/);
    assert.match(text, /h\.\[sequence\] < c\.\[sequence\]/, 'head of key');
    assert.ok(!/FROM \S+ AS h WITH/.test(text), 'the head check never skips locked rows');
  });

  it('the relay claim holds the session applock queuebox_inbox_claim_inbox with the same hints, push rows only', () => {
    const text = allStatements()['inbox claim push']!.text;
    assert.match(text, /= N'queuebox_inbox_claim_inbox';/);
    assert.match(text, /@LockMode = N'Exclusive', @LockOwner = N'Session', @LockTimeout = 10000/);
    assert.ok(text.includes(HINTS));
    assert.match(text, /c\.consumption = N'push'/);
    assert.equal(releaseCount(text), 3, 'stale-lock cleanup, CATCH, and after the claim');
  });

  it('the pull claim locks the source name, owned by the transaction (10 s wait), and never releases it by hand', () => {
    const statement = allStatements()['pull claim']!;
    assert.match(statement.text, /CONCAT\(N'queuebox_pull_claim_inbox:', @p_source\)/);
    assert.match(statement.text, /@LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 10000/);
    assert.match(statement.text, /IF @v_lock_result < 0\s+THROW 51000/);
    assert.ok(statement.text.includes(HINTS));
    assert.equal(releaseCount(statement.text), 0, 'COMMIT or ROLLBACK releases a transaction lock');
    assert.match(statement.text, /c\.state = N'processing' AND c\.lease_expires_at <= SYSUTCDATETIME\(\)/, 'expired processing rows are claimable');
    assert.match(statement.text, /b\.state = N'processing' AND b\.lease_expires_at > SYSUTCDATETIME\(\)/, 'aggregates under a live lease are skipped');
    assert.ok(statement.params.some((p) => p.name === 'p_source' && p.value === SENTINELS.source));
  });

  it('claims take due retries first: two TOP branches (attempt > 0, attempt = 0), each with the hints, ordered by priority then the claim order', () => {
    for (const [name, order] of [
      ['outbox claim', 'u.scheduled_at, u.[sequence], u.id'],
      ['inbox claim push', 'u.scheduled_at, u.[sequence], u.id'],
      ['pull claim', 'u.scheduled_at, u.created_at, u.id'],
    ] as const) {
      const text = allStatements()[name]!.text;
      const retried = text.indexOf('AND c.attempt > 0');
      const fresh = text.indexOf('AND c.attempt = 0');
      assert.ok(retried > 0 && fresh > retried, `${name}: the retry branch comes first`);
      assert.equal(text.split(HINTS).length - 1, 2, `${name}: both branches skip locked rows`);
      assert.equal(text.split('SELECT TOP (@p_limit)').length - 1, 3, `${name}: each branch and the outer pick are bounded`);
      assert.ok(text.includes(`ORDER BY u.claim_priority, ${order}`), `${name}: outer order`);
    }
  });

  it('claims set a fresh token per row and a lease on the database clock', () => {
    for (const name of ['outbox claim', 'inbox claim push', 'pull claim']) {
      const text = allStatements()[name]!.text;
      assert.match(text, /claim_token = NEWID\(\)/, name);
      assert.match(text, /lease_expires_at = DATEADD\(millisecond, @p_lease_ms, SYSUTCDATETIME\(\)\)/, name);
      assert.match(text, /claimed_at = SYSUTCDATETIME\(\)/, name);
    }
  });

  it('every fenced write matches id, processing, token and a live lease, and reports rows via OUTPUT', () => {
    const fenced = fencedStatements();
    assert.equal(Object.keys(fenced).length, 18);
    for (const [name, { text }] of Object.entries(fenced)) {
      assert.match(text, /r\.id = s\.id/, name);
      assert.match(text, /r\.state = N'processing'/, name);
      assert.match(text, /r\.claim_token = s\.token/, name);
      assert.match(text, /r\.lease_expires_at > SYSUTCDATETIME\(\)/, name);
      assert.match(text, /OUTPUT inserted\.id/, name);
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
    for (const name of ['outbox claim', 'outbox reclaim', 'inbox claim push', 'pull claim', 'outbox stats', 'reclaim gate']) {
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

  it('migrations set QUOTED_IDENTIFIER and the ANSI options in every batch that creates a filtered index', () => {
    const statements = mssqlMigrations.flatMap((m) => m.statements(names));
    const filtered = statements.filter((t) => /CREATE\s+INDEX[^;]*\bWHERE\b/.test(t));
    const pgPartial = pgMigrations.flatMap((m) => m.sql(pgNames('public', { outbox: 'outbox', inbox: 'inbox', maintenance: 'queuebox_maintenance' })).split(';')).filter((t) => /CREATE INDEX[^;]*\bWHERE\b/.test(t));
    assert.equal(filtered.length, pgPartial.length, 'one filtered index per PostgreSQL partial index');
    for (const text of filtered) {
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
    assert.deepEqual(
      ms.map((t) => t.columns.map((c) => c.name)),
      pg.map((t) => t.columns.map((c) => c.name)),
      'the same columns as PostgreSQL',
    );
    for (const table of ms) for (const column of table.columns) assert.ok(all.includes(column.name === 'key' || column.name === 'sequence' ? `[${column.name}]` : `${column.name} `), column.name);
  });

  it('migrate runs under the transaction-owned applock queuebox_migrate and creates its migrations table', () => {
    assert.match(MIGRATE_LOCK_SQL, /sp_getapplock @Resource = N'queuebox_migrate', @LockMode = N'Exclusive', @LockOwner = N'Transaction'/);
    assert.match(MIGRATE_LOCK_SQL, /IF @v_lock_result < 0\s+THROW/);
    assert.match(migrationsTableSql(names).join('\n'), /CREATE TABLE \[dbo\]\.\[queuebox_migrations\]/);
  });
});
