/**
 * Table names whose derived object names coincide (`tables.*`).
 *
 * QueueBox names the indexes, constraints and sequences of a table after it (`<outbox>_pending_idx`,
 * `<inbox>_push_pending_idx`…), and a schema holds one relation of a name. `tables.inbox: app` with
 * `tables.outbox: app_push` gave both tables an index `app_push_pending_idx` (and `_retry_idx`,
 * `_keyless_idx`): the outbox's came first, `CREATE INDEX IF NOT EXISTS` skipped the inbox's, the
 * relay claim read the whole inbox, and `migrate` and `--check` said nothing. A table named after
 * QueueBox's own objects (`queuebox_migrations`, `outbox_pending_idx`) was no better. Such names are
 * refused at load, naming the keys; `--check` checks that each index and named constraint of a
 * migration sits on its own table, not just that its name exists.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { LONGEST_DERIVED_SUFFIX } from '../../lib/config/cross-check-config.ts';
import { parseConfig } from '../../lib/config/load-config.ts';
import type { ConfigInput } from '../../lib/config/schema.ts';
import { pgMigrations } from '../../lib/db/postgres/migrations.ts';
import { pgNames } from '../../lib/db/postgres/names.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { mssqlMigrations } from '../../lib/db/sqlserver/migrations.ts';
import { mssqlNames } from '../../lib/db/sqlserver/names.ts';
import { ConfigError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { refusal } from '../helpers/config-refusal.ts';

type Key = 'outbox' | 'inbox' | 'maintenance';
const KEYS: readonly Key[] = ['outbox', 'inbox', 'maintenance'];

/** The `ConfigError` `input` is refused with. */
const refused = (input: ConfigInput): ConfigError => refusal(() => parseConfig(input));

/** The suffixes each table's names get in the migrations' own text (PostgreSQL and SQL Server), found here independently of lib/. */
function migrationSuffixes(): Record<Key, Set<string>> {
  const ph: Record<Key, string> = { outbox: 'zzo', inbox: 'zzi', maintenance: 'zzm' };
  const texts = [
    ...pgMigrations.map((m) => m.sql(pgNames('zzs', ph))),
    ...mssqlMigrations.flatMap((m) => m.statements(mssqlNames('zzs', ph))),
  ];
  const out: Record<Key, Set<string>> = { outbox: new Set(), inbox: new Set(), maintenance: new Set(['_pkey']) };
  for (const text of texts) {
    for (const [token] of text.matchAll(/\bzz[oim]_[a-z0-9_]+/g)) {
      const key = KEYS.find((k) => token.startsWith(`${ph[k]}_`))!;
      out[key].add(token.slice(3));
    }
  }
  return out;
}

describe('table names whose derived names coincide', () => {
  it('tables.inbox app with tables.outbox app_push or app_pull is refused, naming both keys and the shared index names', () => {
    const push = refused({ tables: { inbox: 'app', outbox: 'app_push' } });
    assert.equal(push.key, 'tables.outbox');
    for (const name of ['app_push_pending_idx', 'app_push_retry_idx', 'app_push_keyless_idx', 'tables.inbox']) assert.ok(push.message.includes(name), `${name} in ${push.message}`);
    const pull = refused({ tables: { inbox: 'app', outbox: 'app_pull' } });
    assert.equal(pull.key, 'tables.outbox');
    for (const name of ['app_pull_retry_idx', 'app_pull_keyless_idx', 'tables.inbox']) assert.ok(pull.message.includes(name), `${name} in ${pull.message}`);
  });

  it('every pair of table names the migrations would give a shared object name is refused (both dialects)', () => {
    const suffixes = migrationSuffixes();
    assert.ok(suffixes.inbox.has('_push_pending_idx') && suffixes.outbox.has('_pkey') && suffixes.inbox.has('_push_lease_idx'), 'PostgreSQL and SQL Server suffixes found');
    const cases: Array<Partial<Record<Key, string>>> = [];
    for (const a of KEYS) {
      for (const b of KEYS) {
        if (a === b) continue;
        // The table of b named like an object of a's.
        for (const sa of suffixes[a]) cases.push({ [a]: 'app', [b]: `app${sa}` });
        // An object of b named like an object of a's: app + sa === app<x> + sb.
        for (const sa of suffixes[a]) for (const sb of suffixes[b]) if (sa !== sb && sa.endsWith(sb)) cases.push({ [a]: 'app', [b]: `app${sa.slice(0, sa.length - sb.length)}` });
      }
    }
    assert.ok(cases.length > 50, `${cases.length} cases`);
    for (const tables of cases) {
      const error = refused({ tables });
      assert.match(error.key, /^tables\.(outbox|inbox|maintenance)$/, JSON.stringify(tables));
    }
  });

  it('QueueBox\'s own names and the names of objects it derives are refused as table names, naming the key', () => {
    const cases: Array<[Partial<Record<Key, string>>, Key, string]> = [
      [{ maintenance: 'queuebox_migrations' }, 'maintenance', 'queuebox_migrations'],
      [{ outbox: 'queuebox_migrations' }, 'outbox', 'queuebox_migrations'],
      [{ inbox: 'queuebox_migrations_pkey' }, 'inbox', 'queuebox_migrations_pkey'],
      [{ maintenance: 'outbox_pending_idx' }, 'maintenance', 'outbox_pending_idx'],
      [{ maintenance: 'inbox_sequence_seq' }, 'maintenance', 'inbox_sequence_seq'],
      [{ inbox: 'outbox_pkey' }, 'inbox', 'outbox_pkey'],
      [{ outbox: 'inbox_source_idempotency_key' }, 'outbox', 'inbox_source_idempotency_key'],
      [{ maintenance: 'outbox_key_processing_idx' }, 'maintenance', 'outbox_key_processing_idx'], // a dropped index: migration 6 would drop the table's name
      [{ inbox: 'outbox_claim_0123456789ab' }, 'inbox', 'outbox_claim_0123456789ab'],
    ];
    for (const [tables, key, name] of cases) {
      const error = refused({ tables });
      assert.equal(error.key, `tables.${key}`, JSON.stringify(tables));
      assert.ok(error.message.includes(name), error.message);
    }
  });

  it('names that share a prefix but no derived name load', () => {
    for (const tables of [{}, { inbox: 'app', outbox: 'app_outbox', maintenance: 'app_maintenance' }, { outbox: 'app', inbox: 'app_in' }, { outbox: 'orders_outbox', inbox: 'orders_inbox' }]) {
      assert.doesNotThrow(() => parseConfig({ tables }), JSON.stringify(tables));
    }
  });

  it('no derived suffix is longer than LONGEST_DERIVED_SUFFIX (the length limit on table names)', () => {
    const suffixes = migrationSuffixes();
    for (const key of KEYS) for (const suffix of suffixes[key]) assert.ok(suffix.length <= LONGEST_DERIVED_SUFFIX.length, suffix);
  });

  it('lock keys derived from a table embed its whole name: distinct tables, distinct keys', () => {
    // PostgreSQL: every advisory lock keyed on a table is `queuebox_<purpose>_<qualified table>`, one purpose each.
    const purposes: string[] = [];
    for (const file of ['inbox-queries.ts', 'pull-queries.ts', 'outbox-queries.ts', 'maintenance-queries.ts', 'scale-out-queries.ts']) {
      const text = readFileSync(`lib/db/postgres/${file}`, 'utf8');
      for (const [, key] of text.matchAll(/pg_advisory_xact_lock\([^`]*`, \[`([^`]+)`/g)) {
        const match = /^queuebox_([a-z_]+)_\$\{ctx\.names\.(outbox|inbox|maintenance)\}$/.exec(key!);
        assert.ok(match, `${file}: lock key ${key} does not embed a table's qualified name`);
        purposes.push(match[1]!);
      }
    }
    assert.ok(purposes.length >= 2, purposes.join());
    assert.equal(new Set(purposes).size, purposes.length, purposes.join());
    // SQL Server: the application lock names of two tables whose names extend one another differ.
    const n = mssqlNames('dbo', { outbox: 'app_relay', inbox: 'app', maintenance: 'app_claim' });
    const locks = [n.outboxClaimLock, n.inboxClaimLock, n.pullClaimLockPrefix];
    assert.equal(new Set(locks).size, locks.length);
  });
});

describe('--check: an index or constraint of a migration on another table', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  it('an index or named constraint of the name on another table is named, not taken for the table\'s own', async () => {
    const schema = `${db.schema}_moved`;
    const driver = new PostgresDriver({ config: { ...db.config, database: { ...db.config.database, schema } }, url: db.url });
    const s = `"${schema}"`;
    try {
      await driver.migrate();
      assert.deepEqual(await driver.migrateCheck(), []);
      await db.pool.query(`DROP INDEX ${s}.inbox_push_pending_idx; CREATE INDEX inbox_push_pending_idx ON ${s}.outbox (scheduled_at);
        ALTER TABLE ${s}.inbox DROP CONSTRAINT inbox_state_check; ALTER TABLE ${s}.outbox ADD CONSTRAINT inbox_state_check CHECK (true)`);
      const problems = await driver.migrateCheck();
      assert.ok(
        problems.some((p) => p.startsWith(`index ${s}."inbox_push_pending_idx" is on table ${s}."outbox", not ${s}."inbox"`) && p.includes(`CREATE INDEX IF NOT EXISTS "inbox_push_pending_idx" ON ${s}."inbox"`)),
        problems.join('\n'),
      );
      assert.ok(problems.some((p) => p.startsWith(`constraint "inbox_state_check" of table ${s}."inbox" is on table ${s}."outbox"`)), problems.join('\n'));
    } finally {
      await driver.close();
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });

  it('a schema migrated by an earlier release with tables.inbox app and tables.outbox app_push: --check names the inbox\'s three missing indexes', async () => {
    const schema = `${db.schema}_clash`;
    // The configuration is refused now; an earlier release accepted it and migrated this schema.
    const config = { ...db.config, database: { ...db.config.database, schema }, tables: { ...db.config.tables, inbox: 'app', outbox: 'app_push' } };
    const driver = new PostgresDriver({ config, url: db.url });
    const s = `"${schema}"`;
    try {
      await driver.migrate();
      const problems = await driver.migrateCheck();
      for (const index of ['app_push_pending_idx', 'app_push_retry_idx', 'app_push_keyless_idx']) {
        assert.ok(problems.some((p) => p.startsWith(`index ${s}."${index}" is on table ${s}."app_push", not ${s}."app"`)), `${index}:\n${problems.join('\n')}`);
      }
      assert.equal(problems.length, 3, problems.join('\n'));
    } finally {
      await driver.close();
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });
});
