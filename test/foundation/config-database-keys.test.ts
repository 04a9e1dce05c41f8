/**
 * The `database` keys that used to be accepted and fail later, or be ignored:
 *
 * - `database.schema` naming a schema the database reserves: `pg_*` (`pg_catalog`, `pg_temp`,
 *   `pg_toast`: `migrate` failed with `unacceptable schema name (42939)` naming no key) and
 *   `information_schema` (QueueBox's tables were created inside it); on SQL Server `sys` and
 *   `information_schema`;
 * - a malformed connection string (`notaurl`, a leading space, `postgres//…`: `getaddrinfo ENOTFOUND
 *   base`), a URL of another scheme (`postgress://`, `mysql://`: silently used as PostgreSQL) or of
 *   the other database type: refused naming where it came from (the key, or the variable), never
 *   printing the password;
 * - `database.url` and `database.urlEnv` both set (`url` silently won): refused naming both.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { loadConfig, parseConfig } from '../../lib/config/load-config.ts';
import { resolveDatabaseUrl } from '../../lib/db/create-driver.ts';
import { refusal } from '../helpers/config-refusal.ts';
import { runTsx } from '../helpers/run-tsx.ts';

const PASSWORD = 'Sup3rS3cretPw';

describe('database.schema', () => {
  it('refuses the schemas PostgreSQL reserves (pg_*, information_schema), naming the key', () => {
    for (const schema of ['pg_catalog', 'pg_temp', 'pg_toast', 'pg_queuebox', 'information_schema']) {
      const error = refusal(() => parseConfig({ database: { schema } }));
      assert.equal(error.key, 'database.schema', schema);
      assert.match(error.message, /database\.schema: is .* PostgreSQL reserves/, schema);
    }
    const fromEnv = refusal(() => loadConfig({ env: { QUEUEBOX_DATABASE__SCHEMA: 'pg_temp' } }));
    assert.match(fromEnv.message, /database\.schema \(from QUEUEBOX_DATABASE__SCHEMA\): is "pg_temp"/);
    for (const schema of ['public', 'queuebox', 'pgq', 'app_pg_x', 'sys']) assert.equal(parseConfig({ database: { schema } }).database.schema, schema);
  });

  it('SQL Server: refuses sys and information_schema; pg_* is an ordinary name there', () => {
    for (const schema of ['sys', 'information_schema']) {
      const error = refusal(() => parseConfig({ database: { type: 'sqlserver', schema } }));
      assert.equal(error.key, 'database.schema', schema);
      assert.match(error.message, /SQL Server reserves/, schema);
    }
    for (const schema of ['dbo', 'queuebox', 'pg_catalog']) assert.equal(parseConfig({ database: { type: 'sqlserver', schema } }).database.schema, schema);
  });
});

describe('database.url', () => {
  const refusedUrl = (url: string, type: 'postgres' | 'sqlserver' = 'postgres') => {
    const error = refusal(() => parseConfig({ database: { type, url } }));
    assert.equal(error.key, 'database.url', url);
    assert.ok(!error.message.includes(PASSWORD), `the password is not printed: ${error.message}`);
    return error.message;
  };

  it('refuses what is not a PostgreSQL URL, saying what is wrong and never printing the password', () => {
    assert.match(refusedUrl('notaurl'), /database\.url: is not a PostgreSQL connection URL: it must start with postgres:\/\/ or postgresql:\/\//);
    assert.match(refusedUrl(`postgres//app:${PASSWORD}@db:5432/app`), /is not a PostgreSQL connection URL/);
    assert.match(refusedUrl(`app:${PASSWORD}@db:5432/app`), /is not a PostgreSQL connection URL/);
    assert.match(refusedUrl(` postgres://app:${PASSWORD}@db:5432/app`), /starts or ends with white space/);
    assert.match(refusedUrl(`postgres://app:${PASSWORD}@db:5432/app\n`), /starts or ends with white space/);
    assert.match(refusedUrl(`postgress://app:${PASSWORD}@db:5432/app`), /is a postgress:\/\/ URL: a PostgreSQL URL starts with postgres:\/\/ or postgresql:\/\//);
    assert.match(refusedUrl(`mysql://app:${PASSWORD}@db:3306/app`), /is a mysql:\/\/ URL: a PostgreSQL URL/);
    for (const scheme of ['mssql', 'sqlserver']) {
      assert.match(refusedUrl(`${scheme}://app:${PASSWORD}@db:1433/app`), new RegExp(`is a ${scheme}:// URL \\(SQL Server\\), but database\\.type is postgres: set database\\.type: sqlserver`));
    }
    assert.match(refusedUrl(`postgres://app:${PASSWORD}@db:99999/app`), /is not a valid URL/);
  });

  it('accepts the forms pg connects with', () => {
    for (const url of [
      `postgres://app:${PASSWORD}@db.example:5432/app?sslmode=require`,
      'postgresql://db/app',
      'POSTGRES://db/app',
      'postgres:///app?host=/var/run/postgresql',
      'postgres://app@/app?host=/var/run/postgresql',
      'postgres://%2Fvar%2Frun%2Fpostgresql/app',
      'postgres://app:p%40ss@[::1]:5432/app',
      'socket:/var/run/postgresql?db=app',
      '/var/run/postgresql app',
    ]) {
      assert.equal(parseConfig({ database: { url } }).database.url, url);
    }
  });

  it('names the variable a refused URL came from (DATABASE_URL, QUEUEBOX_DATABASE_URL)', () => {
    for (const variable of ['DATABASE_URL', 'QUEUEBOX_DATABASE_URL']) {
      const error = refusal(() => loadConfig({ env: { [variable]: `mysql://app:${PASSWORD}@db/app` } }));
      assert.match(error.message, new RegExp(`database\\.url \\(from ${variable}\\): is a mysql:// URL`));
      assert.ok(!error.message.includes(PASSWORD));
    }
  });

  it('SQL Server: refuses a URL of another scheme or with white space around it; mssql://, sqlserver:// and ADO strings load', () => {
    assert.match(refusedUrl(`postgres://app:${PASSWORD}@db/app`, 'sqlserver'), /is a postgres:\/\/ URL, but database\.type is sqlserver: give an mssql:\/\/user:password@host:port\/database URL or an ADO connection string/);
    assert.match(refusedUrl(` mssql://app:${PASSWORD}@db/app`, 'sqlserver'), /starts or ends with white space/);
    assert.match(refusedUrl(`mssql://app:${PASSWORD}@db:99999/app`, 'sqlserver'), /is not a valid URL/);
    for (const url of ['mssql://app:p@db:1433/app?encrypt=true', 'sqlserver://db/app', `Server=db,1433;Database=app;User Id=app;Password=${PASSWORD}`]) {
      assert.equal(parseConfig({ database: { type: 'sqlserver', url } }).database.url, url);
    }
  });
});

describe('database.urlEnv', () => {
  it('a malformed URL in the variable is refused naming database.urlEnv and the variable, not the password', () => {
    const config = parseConfig({ database: { urlEnv: 'APP_DATABASE_URL' } });
    for (const value of ['notaurl', `mysql://app:${PASSWORD}@db/app`, ` postgres://app:${PASSWORD}@db/app`]) {
      const error = refusal(() => resolveDatabaseUrl(config, { APP_DATABASE_URL: value }));
      assert.equal(error.key, 'database.urlEnv', value);
      assert.match(error.message, /database\.urlEnv: names environment variable APP_DATABASE_URL, whose value (is|starts)/);
      assert.ok(!error.message.includes(PASSWORD));
    }
    const sqlserver = parseConfig({ database: { type: 'sqlserver', urlEnv: 'APP_DATABASE_URL' } });
    assert.match(refusal(() => resolveDatabaseUrl(sqlserver, { APP_DATABASE_URL: 'postgres://db/app' })).message, /whose value is a postgres:\/\/ URL, but database\.type is sqlserver/);
    assert.equal(resolveDatabaseUrl(config, { APP_DATABASE_URL: 'postgres://db/app' }), 'postgres://db/app');
  });

  it('url and urlEnv both set are refused naming both keys (and the variable that set url)', () => {
    const both = refusal(() => parseConfig({ database: { url: 'postgres://a/db', urlEnv: 'PROD_URL' } }));
    assert.equal(both.key, 'database.url');
    assert.match(both.message, /database\.url: is set together with database\.urlEnv: set one of them/);
    const dir = mkdtempSync(join(tmpdir(), 'qb-config-'));
    try {
      const path = join(dir, 'queuebox.yml');
      writeFileSync(path, 'database:\n  urlEnv: PROD_URL\n');
      const fromEnv = refusal(() => loadConfig({ path, env: { QUEUEBOX_DATABASE__URL: 'postgres://other/db', PROD_URL: 'postgres://prod/db' } }));
      assert.match(fromEnv.message, /database\.url \(from QUEUEBOX_DATABASE__URL\): is set together with database\.urlEnv/);
      // DATABASE_URL and QUEUEBOX_DATABASE_URL fill database.url only when the file sets neither (documented): no conflict.
      assert.equal(loadConfig({ path, env: { DATABASE_URL: 'postgres://other/db' } }).database.urlEnv, 'PROD_URL');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a malformed DATABASE_URL through the CLI', { timeout: 60_000 }, () => {
  it('migrate --check stops naming database.url and DATABASE_URL, not with getaddrinfo ENOTFOUND base', async () => {
    const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', DATABASE_URL: `postgres//app:${PASSWORD}@127.0.0.1:5432/app` };
    const run = await runTsx(['bin/queuebox.ts', 'migrate', '--check'], env, 30_000);
    assert.equal(run.code, 1, run.stderr);
    assert.match(run.stderr, /database\.url \(from DATABASE_URL\): is not a PostgreSQL connection URL/);
    assert.doesNotMatch(run.stderr, /ENOTFOUND/);
    assert.ok(!run.stderr.includes(PASSWORD));
  });
});
