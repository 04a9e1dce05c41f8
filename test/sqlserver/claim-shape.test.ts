/**
 * The SQL Server claims' shapes, checked without a server: each pins a fix a live server would
 * otherwise reveal (claim transaction and its lock, locking reads under RCSI, bounded lock
 * footprint, loose index scan, keyless empty keys, exact source comparison, order in SQL, BIGINT
 * leases, retention chunks).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import sql from 'mssql';
import { UsageError } from '../../lib/errors.ts';
import { pullLockExpression } from '../../lib/db/sqlserver/claim-locks.ts';
import { DELETE_CHUNK } from '../../lib/db/sqlserver/maintenance-queries.ts';
import { APPLOCK_WAIT_MS, dbNowPlusMs, LOCK_WAIT_MS, msValue, SESSION_SETTINGS, statementText } from '../../lib/db/sqlserver/mssql-pool.ts';
import { mssqlNames } from '../../lib/db/sqlserver/names.ts';
import { allStatements, names, SENTINELS } from './statement-shapes.ts';

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

  it('the pick reads the latest committed rows under either RCSI setting and holds no lock; only the UPDATE locks, and only the picked rows', () => {
    for (const name of CLAIMS) {
      const text = allStatements()[name]!.text;
      const tableReads = [...text.matchAll(/FROM \[dbo\]\.\[(?:outbox|inbox)\] AS (\w+)( WITH \(([^)]*)\))?/g)];
      assert.ok(tableReads.length >= 5, name);
      for (const [read, alias, , hints] of tableReads) {
        if (alias === 'o' || alias === 'i') {
          assert.equal(hints, 'UPDLOCK, READPAST, ROWLOCK, FORCESEEK', `${name}: the UPDATE target, reached by seeks on the picked ids only`);
          continue;
        }
        assert.ok(hints?.startsWith('READCOMMITTEDLOCK'), `${name}: ${read} reads committed rows with locking reads, not a snapshot`);
        assert.doesNotMatch(hints ?? '', /UPDLOCK|HOLDLOCK|TABLOCK/, `${name}: ${read} holds nothing`);
      }
      assert.equal(text.split('UPDLOCK').length - 1, 1, `${name}: one locking read`);
      assert.match(text, /INNER JOIN @v_picked AS p ON p\.id = (o|i)\.id/, `${name}: the UPDATE touches only picked ids`);
      assert.match(text, /SELECT TOP \(@p_limit\) u\.id, u\.claim_priority/, `${name}: at most the batch is picked`);
    }
  });

  it('a head check never skips a locked row; a row is re-checked as head in the UPDATE; candidates that are skipped are found by the next claim', () => {
    const outbox = allStatements()['outbox claim']!.text;
    assert.match(outbox, /CROSS APPLY \(SELECT TOP \(1\)[^)]+FROM \[dbo\]\.\[outbox\] AS r WITH \(READCOMMITTEDLOCK\)\s+WHERE r\.\[key\] = k\.v AND r\.state IN \(N'pending', N'processing'\)\s+ORDER BY r\.\[sequence\]\)/);
    assert.match(outbox, /FROM \[dbo\]\.\[outbox\] AS b WITH \(READCOMMITTEDLOCK\) WHERE b\.\[key\] = k\.v AND b\.state = N'processing'/);
    assert.match(outbox, /FROM \[dbo\]\.\[outbox\] AS h WITH \(READCOMMITTEDLOCK\)\s+WHERE h\.\[key\] = o\.\[key\] AND h\.state IN \(N'pending', N'processing'\) AND h\.\[sequence\] < o\.\[sequence\]/);
    const relay = allStatements()['inbox claim push']!.text;
    assert.match(relay, /ROW_NUMBER\(\) OVER \(PARTITION BY r\.source, r\.aggregate_id ORDER BY r\.\[sequence\]\) AS head_rank/);
    assert.match(relay, /MAX\(CASE WHEN r\.state = N'processing' THEN 1 ELSE 0 END\) OVER \(PARTITION BY r\.source, r\.aggregate_id\) AS busy/);
    assert.match(relay, /WHERE h\.source = i\.source AND h\.aggregate_id = i\.aggregate_id AND h\.consumption = N'push'/);
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

  it('the relay ranks heads past rows other transactions are writing (an uncommitted insert does not hold up every aggregate); its UPDATE re-check never skips', () => {
    const relay = allStatements()['inbox claim push']!.text;
    assert.match(relay, /AS busy\s+FROM \[dbo\]\.\[inbox\] AS r WITH \(READCOMMITTEDLOCK, READPAST\)/);
    assert.match(relay, /SELECT 1 FROM \[dbo\]\.\[inbox\] AS h WITH \(READCOMMITTEDLOCK\)\s+WHERE h\.source = i\.source AND h\.aggregate_id = i\.aggregate_id AND h\.consumption = N'push'\s+AND h\.state IN \(N'pending', N'processing'\) AND h\.\[sequence\] < i\.\[sequence\]/);
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
    assert.ok(text.includes("k.[key] <> N''"));
    assert.ok(text.includes("(c.[key] IS NULL OR c.[key] = N'')"));
    assert.ok(text.includes("c.attempt = 0 AND c.scheduled_at <= SYSUTCDATETIME() AND c.[key] = N''"));
    assert.ok(text.includes("(o.[key] IS NULL OR o.[key] = N'' OR NOT EXISTS"));
  });

  it('pull claims and inbox inserts compare the source exactly: binary collation plus byte length (SQL Server ignores trailing spaces in =)', () => {
    assert.match(allStatements()['pull claim']!.text, /i\.source = @p_source AND i\.source_bytes = DATALENGTH\(@p_source\) AND i\.consumption = N'pull'/);
    const insert = allStatements()['inbox insert']!.text;
    assert.equal(insert.split('source_bytes = DATALENGTH(@p_source) AND idempotency_key_bytes = DATALENGTH(@p_idempotency_key)').length - 1, 2, 'the check and the read-back');
  });

  it('claims take due retries first and order by the claim order in SQL', () => {
    for (const [name, order] of [
      ['outbox claim', 'u.scheduled_at, u.[sequence]'],
      ['inbox claim push', 'u.scheduled_at, u.[sequence]'],
      ['pull claim', 'u.scheduled_at, u.created_at, u.id'],
    ] as const) {
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
    assert.match(statement.text, /AND \(source NOT IN \(SELECT value FROM OPENJSON\(@p_keep_sources\) WITH \(value NVARCHAR\(255\) '\$'\)\) OR created_at < DATEADD/);
    assert.equal(statement.params.find((p) => p.name === 'p_keep_sources')!.value, JSON.stringify([SENTINELS.source]));
    assert.equal(statement.params.find((p) => p.name === 'p_keep_older_than_ms')!.value, 2000);
    assert.doesNotMatch(allStatements()['inbox delete finished']!.text, /p_keep_sources/, 'no horizon, no extra condition');
  });

  it('reclaim moves expired rows back in autocommitted chunks far below lock escalation, and counts them all', () => {
    for (const [name, table] of [['outbox reclaim', '[dbo].[outbox]'], ['inbox reclaim', '[dbo].[inbox]']] as const) {
      const text = allStatements()[name]!.text;
      assert.ok(text.includes(`UPDATE TOP (${DELETE_CHUNK}) ${table} WITH (ROWLOCK)`), name);
      assert.match(text, /WHILE @v_chunk > 0\s+BEGIN\s+UPDATE TOP/, name);
      assert.match(text, /OUTPUT inserted\.state INTO @v_moved \(state\)/, `${name}: every moved row is counted by its new state`);
      assert.match(text, /SET @v_chunk = @@ROWCOUNT;\s+END;\s+SELECT @v_reclaimed = COUNT\(CASE WHEN state = N'pending' THEN 1 END\), @v_dead = COUNT\(CASE WHEN state = N'dead' THEN 1 END\) FROM @v_moved;/, name);
      assert.equal(text.match(/DECLARE @v_chunk\b/g)?.length, 1, `${name}: @v_chunk declared once`);
      assert.doesNotMatch(text, /BEGIN TRANSACTION/, `${name}: each chunk commits on its own`);
      assert.doesNotMatch(text, /UPDATE \[dbo\]\.\[(outbox|inbox)\]\s+SET state/, `${name}: no unbounded UPDATE of every expired row`);
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
