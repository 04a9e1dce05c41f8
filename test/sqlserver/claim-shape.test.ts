/**
 * The SQL Server claims' shapes, checked without a server: each pins a fix a live server would
 * otherwise reveal (claim transaction and its lock, locking reads under RCSI, bounded lock
 * footprint, loose index scan, keyless empty keys, exact source comparison, order in SQL, BIGINT
 * leases, retention chunks).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import sql from 'mssql';
import { TransientDatabaseError, UniqueViolationError, UsageError } from '../../lib/errors.ts';
import { pullLockExpression } from '../../lib/db/sqlserver/claim-locks.ts';
import { DELETE_CHUNK } from '../../lib/db/sqlserver/maintenance-queries.ts';
import { DEADLOCK_ATTEMPTS } from '../../lib/db/deadlock-victim.ts';
import { APPLOCK_WAIT_MS, dbNowPlusMs, LOCK_WAIT_MS, msValue, SESSION_SETTINGS, statementText, type MssqlRunner } from '../../lib/db/sqlserver/mssql-pool.ts';
import { mssqlNames } from '../../lib/db/sqlserver/names.ts';
import { allStatements, names, SENTINELS } from './statement-shapes.ts';
import { claimRetryingInFlight, OLDEST_WINDOW } from '../../lib/db/sqlserver/claim-order.ts';
import { OLDEST_WINDOW as PG_OLDEST_WINDOW } from '../../lib/db/postgres/claim-text.ts';
import { pgMigrations } from '../../lib/db/postgres/migrations.ts';
import { inboxClaimPushMany } from '../../lib/db/sqlserver/inbox-claim.ts';
import { outboxClaimMany } from '../../lib/db/sqlserver/outbox-claim.ts';
import { mapMssqlError } from '../../lib/db/sqlserver/error-map.ts';
import { mssqlMigrations } from '../../lib/db/sqlserver/migrations.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

/** Every read of a QueueBox table in `text`: the alias and its table hints (INDEX(…) included). */
function tableReadsOf(text: string): Array<{ read: string; alias: string; hints: string }> {
  return [...text.matchAll(/FROM \[dbo\]\.\[(?:outbox|inbox)\] AS (\w+)(?: WITH \(((?:[^()]|\([^()]*\))*)\))?/g)].map((m) => ({ read: m[0], alias: m[1]!, hints: m[2] ?? '' }));
}

describe('SQL Server claim statements', () => {
  const CLAIMS = ['outbox claim', 'inbox claim push', 'pull claim'] as const;

  it('each claim is one explicit transaction that owns its applock (10 s wait): refused inside an open transaction, never released by hand', () => {
    for (const name of CLAIMS) {
      const text = allStatements()[name]!.text;
      const guard = text.indexOf('IF @@TRANCOUNT > 0');
      const begin = text.indexOf('BEGIN TRANSACTION;');
      const lock = text.indexOf('sp_getapplock');
      const update = text.indexOf('UPDATE ');
      const commit = text.indexOf('COMMIT TRANSACTION;');
      assert.ok(guard === 0 && guard < begin && begin < lock && lock < update && update < commit, `${name}: guard, BEGIN, lock, claim, COMMIT`);
      assert.match(text, /IF @@TRANCOUNT > 0\s+THROW 51001/, name);
      assert.match(text, /@LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 10000;/, name);
      assert.match(text, /IF @v_lock_result < 0\s+BEGIN\s+ROLLBACK TRANSACTION;\s+THROW 51000/, name);
      assert.doesNotMatch(text, /sp_releaseapplock|N'Session'/, `${name}: the transaction's end releases the lock`);
      assert.match(text.slice(commit), /^COMMIT TRANSACTION;\nSELECT [^;]+ FROM @v_claimed ORDER BY [^;]+;$/, `${name}: rows are returned after the COMMIT, sorted in SQL`);
    }
  });

  it('a statement on QueueBox\'s own connection starts with READ COMMITTED, XACT_ABORT ON, a LOCK_TIMEOUT, the index SET options and undoes a handler\'s implicit transactions, ROWCOUNT and TEXTSIZE; a caller transaction is left alone', () => {
    const pool = new sql.ConnectionPool({ server: 'unused' });
    const statement = allStatements()['outbox claim']!;
    const own = statementText(pool, statement);
    assert.ok(own.startsWith(SESSION_SETTINGS) && own.endsWith(statement.text));
    assert.match(SESSION_SETTINGS, /^SET TRANSACTION ISOLATION LEVEL READ COMMITTED; SET XACT_ABORT ON; SET LOCK_TIMEOUT 10000;/);
    const undone = ['IMPLICIT_TRANSACTIONS OFF', 'ROWCOUNT 0', 'TEXTSIZE 2147483647'];
    for (const option of ['ANSI_NULLS ON', 'ANSI_PADDING ON', 'ANSI_WARNINGS ON', 'ARITHABORT ON', 'CONCAT_NULL_YIELDS_NULL ON', 'QUOTED_IDENTIFIER ON', 'NUMERIC_ROUNDABORT OFF', ...undone]) {
      assert.ok(SESSION_SETTINGS.includes(`SET ${option};`), option);
    }
    const callerTx = new sql.Transaction(pool);
    assert.equal(statementText(callerTx, statement), statement.text);
    assert.equal(LOCK_WAIT_MS, APPLOCK_WAIT_MS);
  });

  it('lock names are qualified by schema and table, and the pull lock is the SHA-256 of the exact source (every source its own name, within 255 characters)', () => {
    const text = (name: string) => allStatements()[name]!.text;
    assert.match(text('outbox claim'), /DECLARE @v_lock_resource NVARCHAR\(255\) = N'queuebox:dbo\.outbox:outbox_claim';/);
    assert.match(text('inbox claim push'), /DECLARE @v_lock_resource NVARCHAR\(255\) = N'queuebox:dbo\.inbox:relay_claim';/);
    assert.match(text('pull claim'), /CONCAT\(N'queuebox:dbo\.inbox:pull_claim:', CONVERT\(NVARCHAR\(64\), HASHBYTES\('SHA2_256', @p_source\), 2\)\)/);
    const other = mssqlNames('tenant_b', { outbox: 'outbox', inbox: 'inbox', maintenance: 'queuebox_maintenance' });
    assert.notEqual(other.outboxClaimLock, names.outboxClaimLock);
    assert.notEqual(other.pullClaimLockPrefix, names.pullClaimLockPrefix);
    const longest = mssqlNames('s'.repeat(63), { outbox: 'o'.repeat(50), inbox: 'i'.repeat(50), maintenance: 'm' });
    assert.ok(longest.pullClaimLockPrefix.length + 64 <= 255, 'prefix + hash fits sp_getapplock');
    assert.ok(pullLockExpression(longest.pullClaimLockPrefix).includes('HASHBYTES'));
  });

  it('the pick reads the latest committed rows under either RCSI setting and holds no lock (dirty probes excepted); only the UPDATE locks, and only the picked rows', () => {
    for (const name of CLAIMS) {
      const text = allStatements()[name]!.text;
      const tableReads = tableReadsOf(text);
      assert.ok(tableReads.length >= 5, name);
      for (const { read, alias, hints } of tableReads) {
        if (alias === 'o' || alias === 'i') {
          // FORCESEEK alone would also allow a range seek of the pending index over every due row,
          // each update-locked to the commit: every claim (outbox, relay, pull) names the primary key
          const target = `INDEX([${name === 'outbox claim' ? 'outbox' : 'inbox'}_pkey]), FORCESEEK, UPDLOCK, READPAST, ROWLOCK`;
          assert.equal(hints, target, `${name}: the UPDATE target, reached by seeks on the picked ids only`);
          continue;
        }
        const locks = hints.replace(/^INDEX\(\[\w+\]\), (FORCESEEK, )?/, '');
        assert.ok(locks.startsWith('READCOMMITTEDLOCK') || locks === 'NOLOCK', `${name}: ${read} reads committed rows with locking reads (or is a dirty probe), not a snapshot`);
        assert.doesNotMatch(hints, /UPDLOCK|HOLDLOCK|TABLOCK/, `${name}: ${read} holds nothing`);
      }
      assert.equal(text.split('UPDLOCK').length - 1, 1, `${name}: one locking read`);
      assert.match(text, /INNER JOIN @v_picked AS p ON p\.id = (o|i)\.id/, `${name}: the UPDATE touches only picked ids`);
      assert.match(text, /SELECT TOP \((@p_limit|@p_limit - @v_taken)\) u\.id, (u\.claim_priority|1)/, `${name}: at most the batch is picked`);
    }
  });

  it('a late commit never stalls a claim: the outbox and relay picks wait for no row lock, and skip a key whose lower row another transaction holds', () => {
    for (const [name, target] of [
      ['outbox claim', 'UPDATE o'],
      ['inbox claim push', 'UPDATE i'],
    ] as const) {
      const text = allStatements()[name]!.text;
      const pick = text.slice(text.indexOf('DECLARE @v_picked'), text.indexOf(target));
      for (const { read, alias, hints } of tableReadsOf(pick)) {
        // a read without READPAST or NOLOCK waits for a locked row, for up to LOCK_TIMEOUT, under the claim lock
        assert.match(hints, /\bREADPAST\b|\bNOLOCK\b/, `${name}: ${read} would wait for a row another transaction holds`);
        if (alias === 'd' || alias === 'b') {
          // a probe that skipped a locked lower row would publish the key's next row before it
          assert.match(hints, /\bNOLOCK$/, `${name}: ${read} must see uncommitted rows`);
          assert.doesNotMatch(hints, /READPAST/, `${name}: ${read} must not skip locked rows`);
        }
      }
      const lower = name === 'outbox claim'
        ? /AS d WITH \(INDEX\(\[outbox_key_head_idx\]\), FORCESEEK, NOLOCK\)\s+WHERE d\.\[key\] = (\w)\.\[key\] AND d\.\[key\] IS NOT NULL AND d\.state IN \(N'pending', N'processing'\) AND d\.\[sequence\] < \1\.\[sequence\]\)/g
        : /AS d WITH \(INDEX\(\[inbox_aggregate_head_idx\]\), FORCESEEK, NOLOCK\)\s+WHERE d\.source = (\w)\.source AND d\.aggregate_id = \1\.aggregate_id AND d\.aggregate_id IS NOT NULL\s+AND d\.consumption = N'push' AND d\.state IN \(N'pending', N'processing'\) AND d\.\[sequence\] < \1\.\[sequence\]\)/g;
      assert.deepEqual([...pick.matchAll(lower)].map((m) => m[1]), ['c', 'w', 'h'], `${name}: retries, window and heads each skip a key with a lower row, committed or not`);
      const busy = name === 'outbox claim' ? /AS b WITH \(INDEX\(\[outbox_key_processing_idx\]\), FORCESEEK, NOLOCK\)/g : /AS b WITH \(INDEX\(\[inbox_aggregate_processing_idx\]\), FORCESEEK, NOLOCK\)/g;
      assert.equal([...pick.matchAll(busy)].length, 3, `${name}: a row being put in flight or renewed counts as in flight`);
      // the UPDATE's re-check waits (it never skips): only a lower row whose uncommitted version already left the open states reaches it
      assert.match(text.slice(text.indexOf(target)), /AS h WITH \(INDEX\(\[\w+_(key|aggregate)_head_idx\]\), FORCESEEK, READCOMMITTEDLOCK\)/, name);
    }
  });

  it('every probe of the outbox and relay claims names its filtered index (a plan that cannot use it fails with 8622) and repeats the index filter, IS NOT NULL included', () => {
    const created = new Map<string, string>();
    for (const m of mssqlMigrations) {
      for (const statement of m.statements(names)) {
        for (const [, index, filter] of statement.matchAll(/CREATE (?:UNIQUE )?INDEX \[(\w+)\] ON \[dbo\]\.\[\w+\] \([^)]*\)(?: INCLUDE \([^)]*\))? WHERE (.*?)(?: WITH \(ONLINE = ON\))?'\);/g)) created.set(index!, filter!);
      }
    }
    for (const name of ['outbox claim', 'inbox claim push']) {
      const text = allStatements()[name]!.text;
      // the UPDATE target names the (unfiltered) primary key, created with the table
      const table = name === 'outbox claim' ? 'outbox' : 'inbox';
      assert.ok(mssqlMigrations[0]!.statements(names).some((s) => s.includes(`CONSTRAINT [${table}_pkey] PRIMARY KEY NONCLUSTERED (id)`)), `${name}: ${table}_pkey`);
      const hinted = [...text.matchAll(/FROM \[dbo\]\.\[\w+\] AS (\w+) WITH \(INDEX\(\[(\w+)\]\)(, FORCESEEK)?/g)].filter((m) => m[1] !== 'o' && m[1] !== 'i');
      assert.ok(hinted.length >= 12, `${name}: ${hinted.length} hinted reads`);
      for (const m of hinted) {
        const [, alias, index, seek] = m;
        assert.ok(created.has(index!), `${name}: ${index} is created by a migration`);
        const where = text.slice(m.index!, m.index! + 420);
        // every condition of the index's filter, on this read's alias: the predicate implies the filter
        for (const condition of created.get(index!)!.replaceAll("''", "'").split(' AND ')) {
          assert.ok(where.includes(`${alias}.${condition}`), `${name}: the read of ${index} as ${alias} repeats ${condition}`);
        }
        // a probe by key or aggregate is a seek; the first key of a loose scan (MIN) is one read of the index's start
        const firstKey = /SELECT MIN\(k\.[\w[\]]+\) AS v\s+$/.test(text.slice(Math.max(0, m.index! - 60), m.index!));
        if (/_(head|processing)_idx$/.test(index!) && !firstKey) assert.ok(seek, `${name}: the probe ${alias} of ${index} is a seek`);
      }
      const tableReads = tableReadsOf(text).filter((r) => r.alias !== 'o' && r.alias !== 'i');
      assert.equal(tableReads.length, hinted.length, `${name}: every read of the table names its index`);
    }
  });

  it('the window claim first (outbox and relay, as on PostgreSQL): due retries, then the oldest due rows, and the heads of every open key only when the window gave less than half the batch', () => {
    assert.equal(OLDEST_WINDOW, PG_OLDEST_WINDOW);
    for (const [name, table, retryIdx, pendingIdx, scan] of [
      ['outbox claim', 'outbox', 'outbox_retry_idx', 'outbox_pending_idx', 'WITH open_keys AS ('],
      ['inbox claim push', 'inbox', 'inbox_push_retry_idx', 'inbox_push_pending_idx', 'WITH open_sources AS ('],
    ] as const) {
      const text = allStatements()[name]!.text;
      const retries = text.indexOf(`SELECT TOP (@p_limit) c.id, 0\n  FROM [dbo].[${table}] AS c WITH (INDEX([${retryIdx}]), READCOMMITTEDLOCK, READPAST)`);
      const window = text.indexOf(`SELECT TOP (@p_limit - @v_taken) w.id, 1\n  FROM (SELECT TOP (@p_limit * ${OLDEST_WINDOW})`);
      const windowIndex = text.indexOf(`WITH (INDEX([${pendingIdx}]), READCOMMITTEDLOCK, READPAST)`);
      const gate = text.indexOf('SET @v_window = @@ROWCOUNT;\nSET @v_taken = @v_taken + @v_window;\nIF @v_window * 2 < @p_limit AND @v_taken < @p_limit\nBEGIN\n');
      const heads = text.indexOf(scan);
      const end = text.indexOf('OPTION (MAXRECURSION 0);\nEND;\nUPDATE');
      assert.ok(retries > 0 && retries < window && window < windowIndex && windowIndex < gate && gate < heads && heads < end, `${name}: retries, window, gate, heads`);
      assert.match(text, /SET @v_taken = @@ROWCOUNT;\nINSERT INTO @v_picked/, `${name}: the retries count`);
      assert.equal(text.split('MAXRECURSION').length - 1, 1, `${name}: no recursion outside the gated fallback`);
      assert.ok(text.includes('WHERE w.attempt = 0 AND '), `${name}: the window takes first attempts (retries came first)`);
      assert.equal(text.split('AND NOT EXISTS (SELECT 1 FROM @v_picked AS p WHERE p.id = ').length - 1, 3, `${name}: the fallback never picks a row twice`);
    }
    const relay = allStatements()['inbox claim push']!.text;
    assert.doesNotMatch(relay, /PARTITION BY r\.source, r\.aggregate_id|MAX\(CASE/, 'the relay no longer ranks every open row');
    assert.match(relay, /ROW_NUMBER\(\) OVER \(PARTITION BY k\.source ORDER BY k\.aggregate_id\) AS rn\s+FROM \[dbo\]\.\[inbox\] AS k WITH \(INDEX\(\[inbox_aggregate_head_idx\]\), FORCESEEK, READCOMMITTEDLOCK, READPAST\)\s+INNER JOIN open_aggregates AS p ON k\.source = p\.source AND k\.aggregate_id > p\.v/, 'the next aggregate of each source, one seek each');
    assert.match(relay, /CROSS APPLY \(SELECT MIN\(k\.aggregate_id\) AS v\s+FROM \[dbo\]\.\[inbox\] AS k WITH \(INDEX\(\[inbox_aggregate_head_idx\]\), FORCESEEK, READCOMMITTEDLOCK, READPAST\)\s+WHERE k\.source = s\.v/, 'the first aggregate of each source');
  });

  it('a head probe reads past locked candidates; a row is re-checked as head in the UPDATE; the pull head check never skips', () => {
    const outbox = allStatements()['outbox claim']!.text;
    assert.match(outbox, /CROSS APPLY \(SELECT TOP \(1\)[^)]+FROM \[dbo\]\.\[outbox\] AS r WITH \(INDEX\(\[outbox_key_head_idx\]\), FORCESEEK, READCOMMITTEDLOCK, READPAST\)\s+WHERE r\.\[key\] = k\.v AND r\.\[key\] IS NOT NULL AND r\.state IN \(N'pending', N'processing'\)\s+ORDER BY r\.\[sequence\]\)/);
    assert.match(outbox, /FROM \[dbo\]\.\[outbox\] AS h WITH \(INDEX\(\[outbox_key_head_idx\]\), FORCESEEK, READCOMMITTEDLOCK\)\s+WHERE h\.\[key\] = o\.\[key\] AND h\.\[key\] IS NOT NULL AND h\.state IN \(N'pending', N'processing'\) AND h\.\[sequence\] < o\.\[sequence\]/);
    const relay = allStatements()['inbox claim push']!.text;
    assert.match(relay, /FROM \[dbo\]\.\[inbox\] AS h WITH \(INDEX\(\[inbox_aggregate_head_idx\]\), FORCESEEK, READCOMMITTEDLOCK\)\s+WHERE h\.source = i\.source AND h\.aggregate_id = i\.aggregate_id AND h\.aggregate_id IS NOT NULL AND h\.consumption = N'push'\s+AND h\.state IN \(N'pending', N'processing'\) AND h\.\[sequence\] < i\.\[sequence\]/);
    const pull = allStatements()['pull claim']!.text;
    assert.match(pull, /b\.aggregate_id = k\.v AND b\.state = N'processing' AND b\.lease_expires_at > SYSUTCDATETIME\(\)/, 'aggregates under a live lease are skipped');
    assert.match(pull, /i\.state = N'processing' AND i\.lease_expires_at <= SYSUTCDATETIME\(\)/, 'expired processing rows are claimable');
  });

  it('replay moves rows back in autocommitted chunks far below lock escalation and returns the rows moved', () => {
    const text = allStatements()['outbox replay']!.text;
    // Rows listed by id are reached by a seek on the primary key each (the shape's filter lists ids).
    assert.ok(text.includes(`WITH chunk AS (\n    SELECT TOP (${DELETE_CHUNK}) * FROM [dbo].[outbox] WITH (ROWLOCK, FORCESEEK ([outbox_pkey] (id)))`));
    assert.match(text, /AND \[sequence\] > @v_after\s+ORDER BY \[sequence\]\)\s+UPDATE chunk/, 'each chunk seeks on past the previous one: the table is read once');
    assert.match(text, /OUTPUT inserted\.\[sequence\] INTO @v_moved \(\[sequence\]\);/);
    assert.match(text, /SELECT @v_after = COALESCE\(MAX\(\[sequence\]\), @v_after\) FROM @v_moved;\s+END;/);
    assert.match(text, /DELETE FROM @v_moved;\s+WITH chunk AS/, 'the statement before the CTE ends with a semicolon');
    assert.match(text, /WHERE state IN \(SELECT value FROM OPENJSON\(@p_states\)/, 'a replayed row (now pending) leaves the filter, so the loop ends');
    assert.match(text, /SET @v_replayed = @v_replayed \+ @v_chunk;[^]+END;\s+SELECT @v_replayed AS replayed;$/);
    assert.doesNotMatch(text, /BEGIN TRANSACTION/);
  });

  it('an empty aggregate id is no aggregate for the relay, as on PostgreSQL: never an aggregate of the loose scan, claimed through its own free branch', () => {
    const relay = allStatements()['inbox claim push']!.text;
    assert.equal(relay.split("((c.aggregate_id IS NULL OR c.aggregate_id = N'') OR").length - 1, 1, 'retries');
    assert.equal(relay.split("((w.aggregate_id IS NULL OR w.aggregate_id = N'') OR").length - 1, 1, 'window');
    assert.ok(relay.includes("AND ((i.aggregate_id IS NULL OR i.aggregate_id = N'') OR NOT EXISTS ("), 'UPDATE');
    assert.equal(relay.split("k.aggregate_id IS NOT NULL AND k.aggregate_id <> N''").length - 1, 4, 'the loose scans');
    assert.match(relay, /FROM \[dbo\]\.\[inbox\] AS c WITH \(INDEX\(\[inbox_push_empty_aggregate_idx\]\), READCOMMITTEDLOCK, READPAST\)\s+WHERE c\.state = N'pending' AND c\.consumption = N'push' AND c\.attempt = 0\s+AND c\.scheduled_at <= SYSUTCDATETIME\(\) AND c\.aggregate_id = N''/);
    const eleven = mssqlMigrations.find((m) => m.version === 11)!.statements(names).join('\n');
    assert.ok(eleven.includes("CREATE INDEX [inbox_push_empty_aggregate_idx] ON [dbo].[inbox] (scheduled_at, [sequence]) WHERE state = N''pending'' AND consumption = N''push'' AND aggregate_id = N''''"));
  });

  it('an empty aggregate id is no aggregate for the pull claim either (docs/pull-workers.md, as on PostgreSQL): never an aggregate of the loose scan, claimed freely, no head re-check', () => {
    const pull = allStatements()['pull claim']!.text;
    assert.equal(pull.split("k.aggregate_id IS NOT NULL AND k.aggregate_id <> N''").length - 1, 2, 'the loose scan: first aggregate and next aggregate');
    assert.equal(pull.split("AND (c.aggregate_id IS NULL OR c.aggregate_id = N'')\n").length - 1, 2, 'the free branches: due retries and first attempts');
    assert.ok(pull.includes("AND (i.aggregate_id IS NULL OR i.aggregate_id = N'' OR NOT EXISTS ("), 'UPDATE');
    assert.doesNotMatch(pull, /AND c\.aggregate_id IS NULL\s+AND c\.state/, 'not NULL alone');
    // no pull index filters on the aggregate, so none needs to agree on what empty means
    const ddl = mssqlMigrations.flatMap((m) => m.statements(names)).join('\n');
    const filters = [...ddl.matchAll(/CREATE (?:UNIQUE )?INDEX \[inbox_pull_\w+\] ON \S+ \([^)]*\)(?: INCLUDE \([^)]*\))? WHERE (.+?)(?: WITH \(ONLINE = ON\))?'\)/g)].map((m) => m[1]!);
    assert.ok(filters.length >= 4);
    for (const filter of filters) assert.doesNotMatch(filter, /aggregate_id/, filter);
  });

  it('one row in flight per key and per push aggregate is a unique index (migration 11); an outbox or relay claim it refuses runs again, up to five times', async () => {
    const eleven = mssqlMigrations.find((m) => m.version === 11)!.statements(names).join('\n');
    assert.ok(eleven.includes("CREATE UNIQUE INDEX [outbox_key_in_flight_idx] ON [dbo].[outbox] ([key]) WHERE state = N''processing'' AND [key] IS NOT NULL AND [key] <> N''''"));
    assert.ok(eleven.includes("CREATE UNIQUE INDEX [inbox_push_in_flight_idx] ON [dbo].[inbox] (source, aggregate_id) WHERE state = N''processing'' AND consumption = N''push'' AND aggregate_id IS NOT NULL AND aggregate_id <> N''''"));
    const refused = mapMssqlError(Object.assign(new Error("Cannot insert duplicate key row in object 'dbo.inbox' with unique index 'inbox_push_in_flight_idx'. The duplicate key value is (s, a)."), { number: 2601 }));
    assert.ok(refused instanceof UniqueViolationError && refused.constraint === 'inbox_push_in_flight_idx');
    let calls = 0;
    assert.equal(await claimRetryingInFlight(async () => (++calls < 3 ? Promise.reject(refused) : 'claimed')), 'claimed');
    assert.equal(calls, 3);
    calls = 0;
    await assert.rejects(claimRetryingInFlight(async () => { calls++; throw refused; }), UniqueViolationError);
    assert.equal(calls, 5);
    calls = 0;
    const other = new UniqueViolationError('inbox_source_idempotency_key');
    await assert.rejects(claimRetryingInFlight(async () => { calls++; throw other; }), (e) => e === other);
    assert.equal(calls, 1, 'another unique index is not retried');
    // a claim the server ended as a deadlock victim (1205) was rolled back whole: it runs again
    const victim = mapMssqlError(Object.assign(new Error('Transaction (Process ID 61) was deadlocked on lock resources with another process and has been chosen as the deadlock victim.'), { number: 1205 }));
    calls = 0;
    assert.equal(await claimRetryingInFlight(async () => (++calls < 2 ? Promise.reject(victim) : 'claimed')), 'claimed');
    assert.equal(calls, 2);
    const lockTimeout = mapMssqlError(Object.assign(new Error('Lock request time out period exceeded.'), { number: 1222 }));
    calls = 0;
    await assert.rejects(claimRetryingInFlight(async () => { calls++; throw lockTimeout; }), (e) => e === lockTimeout);
    assert.equal(calls, 1, 'another transient error is not retried here: the worker backs off');
    // a NOLOCK probe that lost its place (error 601) fails the claim as transient: the worker backs off and claims again
    assert.ok(mapMssqlError(Object.assign(new Error('Could not continue scan with NOLOCK due to data movement.'), { number: 601 })) instanceof TransientDatabaseError);
    // both claims run through it: a batch refused twice is sent a third time
    let sent = 0;
    const refusedBy = (table: string, index: string) => ({
      request: () => ({
        input: () => undefined,
        query: async () => {
          if (++sent < 3) throw Object.assign(new Error(`Cannot insert duplicate key row in object 'dbo.${table}' with unique index '${index}'.`), { number: 2601 });
          return { recordset: [] };
        },
      }),
    }) as unknown as MssqlRunner;
    assert.deepEqual(await inboxClaimPushMany(refusedBy('inbox', 'inbox_push_in_flight_idx'), names, { limit: 5, leaseMs: 1000 }), []);
    assert.equal(sent, 3);
    sent = 0;
    assert.deepEqual(await outboxClaimMany(refusedBy('outbox', 'outbox_key_in_flight_idx'), names, { limit: 5, leaseMs: 1000 }), []);
    assert.equal(sent, 3);
  });

  it('migration 11 turns lock escalation off on the outbox and inbox (guarded, once); no PostgreSQL migration changes', () => {
    const eleven = mssqlMigrations.find((m) => m.version === 11)!;
    const texts = eleven.statements(names);
    for (const table of ['[dbo].[outbox]', '[dbo].[inbox]']) {
      const name = table.slice(7, -1);
      assert.ok(texts.includes(`IF EXISTS (SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(N'${table}') AND lock_escalation_desc <> N'DISABLE')\n  ALTER TABLE ${table} SET (LOCK_ESCALATION = DISABLE);`), name);
    }
    assert.equal(texts.join('\n').split('LOCK_ESCALATION = DISABLE').length - 1, 2, 'the outbox and the inbox only');
    // Each statement keeps a table lock until the migrate transaction commits (ALTER TABLE: Sch-M
    // from its start; an online index build: its final S or Sch-M lock), so no index may be built
    // behind an ALTER TABLE of this migration, and the outbox's build (enqueues wait on it) comes last.
    const kinds = texts.map((t) => (t.includes('LOCK_ESCALATION') ? 'alter' : /CREATE (UNIQUE )?INDEX \[outbox_/.test(t) ? 'outbox index' : 'inbox index'));
    assert.deepEqual(kinds, ['inbox index', 'inbox index', 'outbox index', 'alter', 'alter']);
    assert.ok(!pgMigrations.some((m) => m.version === 11), 'PostgreSQL has no migration 11');
    assert.deepEqual(mssqlMigrations.map((m) => m.version), [...mssqlMigrations.map((m) => m.version)].sort((a, b) => a - b), 'in order');
  });

  it('keys and pull aggregates come from a loose index scan (one seek per key), so a claim costs the keys, not the rows behind them', () => {
    for (const [name, column] of [['outbox claim', '[key]'], ['pull claim', 'aggregate_id']] as const) {
      const text = allStatements()[name]!.text;
      assert.ok(text.includes(`SELECT MIN(k.${column}) AS v`), name);
      assert.ok(text.includes(`ROW_NUMBER() OVER (ORDER BY k.${column}) AS rn`), name);
      assert.ok(text.includes(`ON k.${column} > p.v`), name);
      assert.match(text, /WHERE n\.rn = 1/, name);
      assert.match(text, /OPTION \(MAXRECURSION 0\);/, name);
    }
  });

  it('an empty outbox key is keyless: never a key of the loose scan, claimed through the keyless branches', () => {
    const text = allStatements()['outbox claim']!.text;
    assert.ok(text.includes("k.[key] IS NOT NULL AND k.[key] <> N''"));
    assert.ok(text.includes("(c.[key] IS NULL OR c.[key] = N'' OR ("));
    assert.ok(text.includes("(w.[key] IS NULL OR w.[key] = N'' OR ("));
    assert.ok(text.includes("c.attempt = 0 AND c.scheduled_at <= SYSUTCDATETIME() AND c.[key] = N''"));
    assert.ok(text.includes("(o.[key] IS NULL OR o.[key] = N'' OR NOT EXISTS"));
  });

  it('pull claims and inbox inserts compare the source exactly: binary collation plus byte length (SQL Server ignores trailing spaces in =)', () => {
    assert.match(allStatements()['pull claim']!.text, /i\.source = @p_source AND i\.source_bytes = DATALENGTH\(@p_source\) AND i\.consumption = N'pull'/);
    const insert = allStatements()['inbox insert']!.text;
    assert.equal(insert.split('source_bytes = DATALENGTH(@p_source) AND idempotency_key_bytes = DATALENGTH(@p_idempotency_key)').length - 1, 2, 'the check and the read-back');
  });

  it('claims take due retries first and order by the claim order in SQL', () => {
    for (const name of ['outbox claim', 'inbox claim push']) {
      const text = allStatements()[name]!.text;
      assert.ok(text.indexOf('c.attempt > 0') < text.indexOf('w.attempt = 0'), `${name}: the retry branch comes first`);
      assert.match(text, /SELECT TOP \(@p_limit\) c\.id, 0\n[^;]+ORDER BY c\.scheduled_at, c\.\[sequence\];/, `${name}: retries in claim order`);
      assert.match(text, /ORDER BY w\.scheduled_at, w\.\[sequence\];/, `${name}: the window in claim order`);
      assert.match(text, /ORDER BY u\.scheduled_at, u\.\[sequence\]\s+OPTION/, `${name}: heads and free rows in claim order`);
    }
    for (const [name, order] of [['pull claim', 'u.scheduled_at, u.created_at, u.id']] as const) {
      const text = allStatements()[name]!.text;
      assert.ok(text.includes(`ORDER BY u.claim_priority, ${order}`), `${name}: pick order`);
      assert.ok(text.includes('CASE WHEN c.attempt > 0 THEN 0 ELSE 1 END AS claim_priority'), `${name}: heads ranked retries first`);
      assert.ok(text.indexOf('c.attempt > 0') < text.indexOf('c.attempt = 0'), `${name}: the retry branch comes first`);
    }
    assert.match(allStatements()['pull claim']!.text, /FROM @v_claimed ORDER BY claim_priority, scheduled_at, created_at, id;$/);
  });

  it('claims set a fresh token per row and a lease on the database clock from the start of the batch, sent as BIGINT milliseconds', () => {
    for (const name of [...CLAIMS, 'outbox renew', 'pull renew']) {
      const statement = allStatements()[name]!;
      if (CLAIMS.includes(name as (typeof CLAIMS)[number])) {
        assert.match(statement.text, /claim_token = NEWID\(\)/, name);
        assert.match(statement.text, /claimed_at = SYSUTCDATETIME\(\)/, name);
      }
      if (CLAIMS.includes(name as (typeof CLAIMS)[number])) {
        // The lease starts when the batch began, before any wait for the claim lock or a row lock.
        // The pull claim puts a floor under it (see pull-claim-lease in driver-behaviour.test.ts).
        const lease = dbNowPlusMs('@p_lease_ms', '@v_claim_start');
        assert.ok(statement.text.includes(`lease_expires_at = ${name === 'pull claim' ? `CASE WHEN ${lease} >` : lease}`), name);
        const start = statement.text.indexOf('DECLARE @v_claim_start DATETIME2(7) = SYSUTCDATETIME();');
        assert.ok(start > 0 && start < statement.text.indexOf('sp_getapplock'), `${name}: the start is read before the lock wait`);
      } else {
        assert.ok(statement.text.includes(`lease_expires_at = ${dbNowPlusMs('@p_lease_ms')}`), name);
      }
      const lease = statement.params.find((p) => p.name === 'p_lease_ms')!;
      assert.equal(lease.type, sql.BigInt, name);
      assert.equal(lease.value, SENTINELS.leaseMs, name);
    }
    assert.throws(() => msValue('leaseMs', Number.NaN), UsageError);
    assert.throws(() => msValue('leaseMs', -1), UsageError);
    assert.equal(msValue('delayMs', -5, true), -5);
  });

  it('retention deletes with its state as a literal (the filtered index applies), in autocommitted chunks far below lock escalation', () => {
    for (const [name, state] of [['outbox delete finished', 'sent'], ['inbox delete finished', 'processed']] as const) {
      const statement = allStatements()[name]!;
      assert.ok(statement.text.includes(`WHERE state = N'${state}' AND`), name);
      assert.ok(!statement.params.some((p) => p.name === 'p_state'), `${name}: no state parameter`);
      assert.match(statement.text, /WHILE @v_chunk > 0 AND @v_deleted < @p_limit/, name);
      assert.ok(statement.text.includes(`ELSE ${DELETE_CHUNK} END`), name);
      assert.doesNotMatch(statement.text, /BEGIN TRANSACTION/, `${name}: each chunk commits on its own`);
    }
    assert.ok(DELETE_CHUNK * 5 < 5000, 'a chunk with its index entries stays below 5,000 locks');
  });

  it('inbox retention keeps the replay-horizon sources (bound as one JSON list) until they are older than the horizon', () => {
    const statement = allStatements()['inbox delete finished with a replay horizon']!;
    assert.ok(statement.text.includes(`WHERE state = N'dead' AND created_at < @v_cutoff`));
    // `source` is binary-collated: the list's values are compared in that collation (a plain
    // `NOT IN` against an OPENJSON column is a collation conflict, error 468) and by byte length.
    assert.match(
      statement.text,
      /AND \(NOT EXISTS \(SELECT 1 FROM OPENJSON\(@p_keep_sources\) WITH \(value NVARCHAR\(255\) '\$'\) AS f\s+WHERE f\.value = source COLLATE Latin1_General_100_BIN2 AND DATALENGTH\(f\.value\) = DATALENGTH\(source\)\) OR created_at < DATEADD/,
    );
    assert.equal(statement.params.find((p) => p.name === 'p_keep_sources')!.value, JSON.stringify([SENTINELS.source]));
    assert.equal(statement.params.find((p) => p.name === 'p_keep_older_than_ms')!.value, 2000);
    assert.doesNotMatch(allStatements()['inbox delete finished']!.text, /p_keep_sources/, 'no horizon, no extra condition');
  });

  it('no statement compares a key, topic or source with a list of texts by IN: the columns are binary-collated, the list is not', () => {
    for (const [name, statement] of Object.entries(allStatements())) {
      assert.doesNotMatch(statement.text, /\bIN\s*\(\s*SELECT\s+value\s+FROM\s+OPENJSON\([^)]*\)\s+WITH\s*\(\s*value\s+NVARCHAR\(255\)/i, name);
    }
  });

  it('reclaim moves expired rows back in autocommitted chunks far below lock escalation, and counts them all', () => {
    for (const [name, table] of [['outbox reclaim', '[dbo].[outbox]'], ['inbox reclaim', '[dbo].[inbox]']] as const) {
      const text = allStatements()[name]!.text;
      assert.ok(text.includes(`UPDATE TOP (${DELETE_CHUNK}) ${table} WITH (ROWLOCK)`), name);
      assert.match(text, /WHILE @v_chunk > 0\s+BEGIN\s+BEGIN TRY\s+UPDATE TOP/, name);
      assert.match(text, /OUTPUT inserted\.state INTO @v_moved \(state\)/, `${name}: every moved row is counted by its new state`);
      assert.match(text, /SET @v_chunk = @@ROWCOUNT;[^]+END CATCH;\s+END;\s+SELECT @v_reclaimed = COUNT\(CASE WHEN state = N'pending' THEN 1 END\), @v_dead = COUNT\(CASE WHEN state = N'dead' THEN 1 END\) FROM @v_moved;/, name);
      assert.equal(text.match(/DECLARE @v_chunk\b/g)?.length, 1, `${name}: @v_chunk declared once`);
      assert.doesNotMatch(text, /BEGIN TRANSACTION/, `${name}: each chunk commits on its own`);
      assert.doesNotMatch(text, /UPDATE \[dbo\]\.\[(outbox|inbox)\]\s+SET state/, `${name}: no unbounded UPDATE of every expired row`);
    }
  });

  it('reclaim runs a chunk chosen as a deadlock victim again inside its batch, so the chunks committed before it stay counted', () => {
    for (const name of ['outbox reclaim', 'inbox reclaim']) {
      const text = allStatements()[name]!.text;
      const loop = text.slice(text.indexOf('WHILE @v_chunk > 0'), text.indexOf('SELECT @v_reclaimed'));
      assert.match(loop, /^WHILE @v_chunk > 0\s+BEGIN\s+BEGIN TRY\s+UPDATE TOP/, `${name}: each chunk in its own TRY`);
      assert.match(loop, /SET @v_chunk = @@ROWCOUNT;\s+SET @v_victim = 0;\s+END TRY/, `${name}: a chunk that commits resets the count of its victims`);
      assert.match(loop, /BEGIN CATCH\s+IF XACT_STATE\(\) <> 0 ROLLBACK TRANSACTION;\s+SET @v_victim = @v_victim \+ 1;/, name);
      assert.ok(loop.includes(`IF ERROR_NUMBER() <> 1205 OR @v_victim >= ${DEADLOCK_ATTEMPTS}\n      BEGIN\n        THROW;\n      END;`), `${name}: another error, or the last attempt's deadlock, goes to the gate's CATCH`);
      assert.match(loop, /SET @v_pause = DATEADD\(MILLISECOND, 5 \+ ABS\(CHECKSUM\(NEWID\(\)\) % \(20 \* @v_victim\)\), CAST\(0 AS DATETIME\)\);\s+WAITFOR DELAY @v_pause;\s+END CATCH;\s+END;\s*$/, `${name}: a random pause, then the same chunk again`);
      assert.doesNotMatch(loop, /DELETE\s+(FROM\s+)?@v_moved|@v_reclaimed\s*=\s*0/, `${name}: nothing counted is forgotten`);
    }
  });

  it('reclaim counts the lost lease as a failed attempt and makes the row dead when it was the last (outbox: max_attempts; relay: a bound maxAttempts)', () => {
    for (const [name, max, call] of [['outbox reclaim', 'max_attempts', 'delivery'], ['inbox reclaim', '@p_max_attempts', 'forward']] as const) {
      const text = allStatements()[name]!.text;
      const last = `attempt + 1 >= ${max}`;
      assert.ok(text.includes(`SET state = CASE WHEN ${last} THEN N'dead' ELSE N'pending' END`), name);
      assert.ok(text.includes(`attempt = CASE WHEN ${last} THEN attempt ELSE attempt + 1 END`), `${name}: a dead row keeps the number of its last attempt`);
      assert.ok(text.includes(`THEN CONCAT(N'gave up after ', attempt + 1, N' of ', ${max}, N' attempts: the lease of the last one expired during the ${call} (the call did not finish within its lease)')`), name);
      assert.ok(text.includes(`ELSE CONCAT(N'lease expired during ${call} attempt ', attempt + 1, N' of ', ${max}, N' (the call did not finish within its lease)') END`), name);
      assert.match(text, /SELECT CAST\(.*\) AS ran, @v_reclaimed AS reclaimed, @v_dead AS dead;/, name);
    }
    assert.deepEqual(allStatements()['inbox reclaim']!.params.find((p) => p.name === 'p_max_attempts')?.value, 5);
  });

  it('the pull claim counts the lease of an expired row as a failed attempt and says so in last_error', () => {
    const text = allStatements()['pull claim']!.text;
    assert.ok(text.includes(`attempt = CASE WHEN i.state = N'processing' THEN i.attempt + 1 ELSE i.attempt END`), text);
    assert.ok(text.includes(`last_error = CASE WHEN i.state = N'processing' THEN CONCAT(N'lease expired during attempt ', i.attempt + 1, N' (the handler did not finish within its lease)') ELSE i.last_error END`), text);
    for (const other of ['outbox claim', 'inbox claim push']) assert.doesNotMatch(allStatements()[other]!.text, /\battempt = CASE/, `${other}: takes pending rows only`);
  });

});
