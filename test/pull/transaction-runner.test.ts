import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseConfig } from '../../lib/config/load-config.ts';
import { SqlServerDriver } from '../../lib/db/sqlserver/sqlserver-driver.ts';
import { TransientDatabaseError, UsageError } from '../../lib/errors.ts';
import { defaultTransactionRunner } from '../../lib/pull/transaction-runner.ts';
import type { Driver } from '../../lib/db/driver.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

describe('the default transaction runner of a pull worker', () => {
  it('opens an mssql transaction on the SQL Server driver pool (a closed port gives a transient error, not a usage error)', async () => {
    const url = 'mssql://sa:secret@127.0.0.1:1/queuebox';
    const driver = new SqlServerDriver({ config: parseConfig({ database: { type: 'sqlserver', url, connectTimeoutMs: 2000 } }), url });
    try {
      const run = defaultTransactionRunner(driver);
      await assert.rejects(run(async () => 'never'), (error: unknown) => error instanceof TransientDatabaseError);
    } finally {
      await driver.close().catch(() => {});
    }
  });

  it('refuses a driver it cannot open transactions on, saying which option to pass', () => {
    const foreign = { dialect: 'sqlserver' } as unknown as Driver;
    assert.throws(() => defaultTransactionRunner(foreign), (error: unknown) => error instanceof UsageError && /transactions/.test(error.message));
  });
});
