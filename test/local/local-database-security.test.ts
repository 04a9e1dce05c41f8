/**
 * `queuebox local`'s embedded PostgreSQL belongs to the developer alone: random passwords per
 * cluster, QueueBox's work as a role that is not a superuser, a private directory, and a local run
 * file the console trusts only when it is the developer's own, unwritable by others, and names the
 * database it leads to.
 */
import assert from 'node:assert/strict';
import { chmodSync, chownSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { readLocalRunFile, writeLocalRunFile } from '../../lib/console/local-run-file.ts';
import { consoleConfig } from '../../lib/console/run-console.ts';
import { ConfigError } from '../../lib/errors.ts';
import { EMBEDDED_ROLE, startEmbeddedDatabase, type EmbeddedDatabase } from '../../lib/local/embedded-database.ts';

async function one<R extends pg.QueryResultRow>(url: string, text: string): Promise<R> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<R>(text)).rows[0]!;
  } finally {
    await client.end();
  }
}

const isRoot = process.getuid?.() === 0;

describe('queuebox local: the embedded database', { timeout: 120_000 }, () => {
  let first: EmbeddedDatabase;
  let second: EmbeddedDatabase;
  let dir: string;
  before(async () => {
    [first, second] = await Promise.all([startEmbeddedDatabase(), startEmbeddedDatabase()]);
    dir = mkdtempSync(join(tmpdir(), 'qb-run-file-'));
  });
  after(async () => {
    await Promise.all([first?.stop(), second?.stop()]);
    rmSync(dir, { recursive: true, force: true });
  });

  it('has a random password per cluster, for the QueueBox role and for the superuser', () => {
    const password = (url: string) => new URL(url).password;
    assert.notEqual(password(first.url), password(second.url));
    assert.notEqual(password(first.adminUrl), password(second.adminUrl));
    assert.notEqual(password(first.url), 'queuebox');
    assert.ok(password(first.url).length >= 32 && password(first.adminUrl).length >= 32);
  });

  it('runs QueueBox as a role that is not a superuser and cannot create roles or databases, owning database queuebox', async () => {
    const me = await one<{ user: string; rolsuper: boolean; rolcreaterole: boolean; rolcreatedb: boolean; owner: string }>(
      first.url,
      `SELECT current_user AS user, r.rolsuper, r.rolcreaterole, r.rolcreatedb, pg_get_userbyid(d.datdba) AS owner
         FROM pg_roles r, pg_database d WHERE r.rolname = current_user AND d.datname = current_database()`,
    );
    assert.deepEqual(me, { user: EMBEDDED_ROLE, rolsuper: false, rolcreaterole: false, rolcreatedb: false, owner: EMBEDDED_ROLE });
    await assert.rejects(one(first.url, `COPY (SELECT 1) TO PROGRAM 'true'`), /permission denied|must be superuser|pg_execute_server_program/);
  });

  it('refuses a login with the old fixed password', async () => {
    const fixed = new URL(first.adminUrl);
    fixed.password = 'queuebox';
    await assert.rejects(one(fixed.toString(), 'SELECT 1'), /password authentication failed/);
  });

  it('keeps its directory and data directory private to their owner (0700)', async () => {
    const { data } = await one<{ data: string }>(first.adminUrl, `SELECT current_setting('data_directory') AS data`);
    assert.equal(statSync(dirname(data)).mode & 0o777, 0o700, 'the cluster directory');
    assert.equal(statSync(data).mode & 0o077, 0, 'the data directory');
  });

  it('writes the local run file 0600 even under umask 0, replacing a planted file or link instead of writing through it', () => {
    const file = join(dir, 'run.json');
    const planted = join(dir, 'planted.json');
    writeFileSync(planted, 'theirs\n', { mode: 0o666 });
    symlinkSync(planted, file);
    const umask = process.umask(0);
    try {
      writeLocalRunFile({ url: first.url, schema: 'public', marker: first.marker }, file);
    } finally {
      process.umask(umask);
    }
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.equal(statSync(planted).size, 'theirs\n'.length, 'the link target is untouched');
    assert.equal(readLocalRunFile(file)?.url, first.url);
  });

  it('the console uses the local run file when it is the developer\'s own and its database carries the mark', async () => {
    const file = join(dir, 'good.json');
    writeLocalRunFile({ url: first.url, schema: 'public', marker: first.marker }, file);
    let stderr = '';
    const config = await consoleConfig({ env: {}, localRunFile: file, stderr: (t) => (stderr += t) });
    assert.equal(config.database.url, first.url);
    assert.match(stderr, /using the local run's embedded PostgreSQL/);
  });

  const refuses = async (file: string, why: RegExp) =>
    assert.rejects(consoleConfig({ env: {}, localRunFile: file, stderr: () => {} }), (error: unknown) => error instanceof ConfigError && why.test(error.message));

  it('the console refuses a run file the group or others may write', async () => {
    const file = join(dir, 'writable.json');
    writeLocalRunFile({ url: first.url, schema: 'public', marker: first.marker }, file);
    chmodSync(file, 0o666);
    await refuses(file, /not trusted: the group or others may write it \(mode 666\)/);
  });

  it('the console refuses a run file owned by another user', { skip: !isRoot && 'needs root to give a file away' }, async () => {
    const file = join(dir, 'foreign.json');
    writeLocalRunFile({ url: first.url, schema: 'public', marker: first.marker }, file);
    chownSync(file, 4242, 4242);
    await refuses(file, /not trusted: it belongs to uid 4242, not to you/);
  });

  it('the console refuses a run file that is a symbolic link', async () => {
    const file = join(dir, 'link.json');
    symlinkSync(join(dir, 'good.json'), file);
    await refuses(file, /not trusted: it is a symbolic link/);
  });

  it('the console refuses a run file whose address leads to another database than the one it names', async () => {
    const file = join(dir, 'other.json');
    // Another cluster (as if another server took the port after the run ended), the right password: the mark differs.
    writeLocalRunFile({ url: second.url, schema: 'public', marker: first.marker }, file);
    await refuses(file, /not the one that run created/);
  });
});
