/**
 * SQL Server connection settings, identifier quoting and error mapping, checked without a server.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseConfig } from '../../lib/config/load-config.ts';
import { ConfigError, QueueBoxError, TransientDatabaseError, UniqueViolationError } from '../../lib/errors.ts';
import { APPLOCK_NOT_GRANTED, mapMssqlError } from '../../lib/db/sqlserver/error-map.ts';
import { APPLOCK_WAIT_MS, mssqlPoolConfig } from '../../lib/db/sqlserver/mssql-pool.ts';
import { mssqlNames, quoteMssqlIdent } from '../../lib/db/sqlserver/names.ts';
import { createDriver } from '../../lib/db/create-driver.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

const database = (over: Record<string, unknown> = {}) => parseConfig({ database: { type: 'sqlserver', url: 'mssql://x@h/db', ...over } }).database;

describe('SQL Server connection settings', () => {
  it('keeps the request timeout at 30 s or more, above the 10 s applock wait', () => {
    const config = mssqlPoolConfig(database(), 'mssql://u:p@db.example:1433/app');
    assert.ok(config.requestTimeout! >= 30_000 && config.requestTimeout! > APPLOCK_WAIT_MS);
    assert.equal(mssqlPoolConfig(database({ requestTimeoutMs: 45_000 }), 'mssql://h/app').requestTimeout, 45_000);
    assert.throws(() => database({ requestTimeoutMs: 10_000 }), ConfigError);
  });

  it('parses the URL form with user, password, port, database and TLS flags', () => {
    const config = mssqlPoolConfig(database({ poolMax: 2 }), 'mssql://app%40corp:p%3Ass@db.example:14330/orders?encrypt=true&trustServerCertificate=true');
    assert.equal(config.server, 'db.example');
    assert.equal(config.port, 14330);
    assert.equal(config.database, 'orders');
    assert.equal(config.user, 'app@corp');
    assert.equal(config.password, 'p:ss');
    assert.equal(config.options?.encrypt, true);
    assert.equal(config.options?.trustServerCertificate, true);
    assert.equal(config.options?.useUTC, true);
    assert.equal(config.options?.enableQuotedIdentifier, true);
    assert.equal(config.pool?.max, 2);
  });

  it('defaults to encrypted connections that verify the certificate', () => {
    const config = mssqlPoolConfig(database(), 'sqlserver://h/app');
    assert.equal(config.port, 1433);
    assert.equal(config.options?.encrypt, true);
    assert.equal(config.options?.trustServerCertificate, false);
  });

  it('accepts an ADO connection string', () => {
    const config = mssqlPoolConfig(database(), 'Server=db.example,1444;Database=orders;User Id=app;Password=secret;Encrypt=true;TrustServerCertificate=true');
    assert.equal(config.server, 'db.example');
    assert.equal(config.port, 1444);
    assert.equal(config.database, 'orders');
    assert.equal(config.user, 'app');
    assert.equal(config.password, 'secret');
    assert.ok(config.requestTimeout! >= 30_000);
  });

  it('refuses a URL of another database, or a connection string without a server, naming database.url', () => {
    for (const [url, message] of [
      ['postgres://u:p@db.example:5432/app', /database\.url: is a postgres:\/\/ URL, but database\.type is sqlserver: give an mssql:\/\/user:password@host:port\/database URL/],
      ['Database=orders;User Id=app;Password=secret', /database\.url: names no server: give an mssql:\/\/user:password@host:port\/database URL or an ADO connection string with Server=/],
    ] as const) {
      assert.throws(() => mssqlPoolConfig(database(), url), (error: unknown) => error instanceof ConfigError && message.test(error.message), url);
    }
  });
});

describe('SQL Server driver construction', () => {
  it('createDriver builds the SQL Server driver for database.type sqlserver without connecting; schema defaults to dbo', async () => {
    const config = parseConfig({ database: { type: 'sqlserver', url: 'mssql://u:p@127.0.0.1:1/none' } });
    const driver = await createDriver(config, {});
    assert.equal(driver.dialect, 'sqlserver');
    assert.equal((driver as unknown as { names: { outbox: string } }).names.outbox, '[dbo].[outbox]');
    await driver.close();
  });
});

describe('SQL Server identifiers', () => {
  it('brackets validated identifiers and refuses anything else', () => {
    assert.equal(quoteMssqlIdent('outbox'), '[outbox]');
    for (const bad of ['a]; DROP TABLE x; --', 'Outbox', '1x', 'a b', '']) assert.throws(() => quoteMssqlIdent(bad), QueueBoxError, bad);
    const n = mssqlNames('app', { outbox: 'ob', inbox: 'ib', maintenance: 'mt' });
    assert.equal(n.outbox, '[app].[ob]');
    assert.equal(n.outboxClaimLock, 'queuebox:app.ob:outbox_claim');
    assert.equal(n.inboxClaimLock, 'queuebox:app.ib:relay_claim');
    assert.equal(n.pullClaimLockPrefix, 'queuebox:app.ib:pull_claim:');
  });
});

describe('SQL Server error mapping', () => {
  it('maps unique violations 2627 and 2601 to UniqueViolationError', () => {
    const mapped = mapMssqlError({ number: 2627, message: "Violation of UNIQUE KEY constraint 'inbox_source_idempotency_key'. Cannot insert duplicate key" });
    assert.ok(mapped instanceof UniqueViolationError);
    assert.equal(mapped.constraint, 'inbox_source_idempotency_key');
    assert.ok(mapMssqlError({ number: 2601, message: "Cannot insert duplicate key row in object 'x' with unique index 'ix'" }) instanceof UniqueViolationError);
  });

  it('maps deadlocks, lock timeouts, applock refusals and lost connections to TransientDatabaseError', () => {
    for (const error of [{ number: 1205 }, { number: 1222 }, { number: APPLOCK_NOT_GRANTED }, { code: 'ESOCKET' }, { code: 'ETIMEOUT' }, { code: 'EREQUEST', originalError: { code: 'ECONNRESET' } }]) {
      const mapped = mapMssqlError({ message: 'x', ...error });
      assert.ok(mapped instanceof TransientDatabaseError, JSON.stringify(error));
    }
  });

  it('passes other errors through unchanged', () => {
    const error = { number: 208, message: "Invalid object name 'outbox'." };
    assert.equal(mapMssqlError(error), error);
  });
});
