/**
 * The database secret is read at run time from Secrets Manager or SSM (Powertools Parameters, over
 * the AWS SDK's wire protocol to a local endpoint), cached across invocations, and fetched again
 * when a rotated password refuses the login — against a real PostgreSQL role whose password changes.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, afterEach, before, describe, it } from 'node:test';
import pg from 'pg';
import { handler as migrateHandler } from '../../functions/migrate.ts';
import { handler as reclaimHandler } from '../../functions/reclaim.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { secretEnvNames, withDatabaseUrl } from '../../lib/runtime/secrets.ts';
import { loadSourceSecrets } from '../../lib/runtime/source-secrets.ts';
import { loadConfig, parseConfig } from '../../lib/config/load-config.ts';
import { createTestDatabase, testDatabaseUrl, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { FakeSecretStore } from '../helpers/fake-secret-store.ts';

describe('database and source secrets at run time', () => {
  const store = new FakeSecretStore();
  let db: TestDatabase;
  let admin: pg.Pool;
  // A rotation here switches users (the alternating-users strategy of Secrets Manager) and
  // disables the old one: its login is then refused (28000), whatever the server's auth method.
  const suffix = randomBytes(4).toString('hex');
  const roles = [`qb_rotating_a_${suffix}`, `qb_rotating_b_${suffix}`] as const;
  const saved = { ...process.env };
  let base = '';
  // Each role has a password of its own, so the test holds on a server with password
  // authentication (the embedded PostgreSQL) as well as on one that trusts every login.
  const password = randomBytes(12).toString('hex');
  const url = (role: string) => {
    const u = new URL(base);
    u.username = role;
    u.password = password;
    return u.toString();
  };

  before(async () => {
    db = await createTestDatabase();
    base = testDatabaseUrl();
    admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
    for (const role of roles) {
      await admin.query(`CREATE ROLE "${role}" LOGIN PASSWORD '${password}'`);
      await admin.query(`GRANT USAGE ON SCHEMA "${db.schema}" TO "${role}"`);
      await admin.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "${db.schema}" TO "${role}"`);
    }
    const endpoint = await store.start();
    Object.assign(process.env, { AWS_ENDPOINT_URL: endpoint, AWS_REGION: 'eu-west-1', AWS_ACCESS_KEY_ID: 'test', AWS_SECRET_ACCESS_KEY: 'test' });
  });
  afterEach(() => setContainer(undefined));
  after(async () => {
    for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
    Object.assign(process.env, saved);
    for (const role of roles) {
      await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
      await admin.query(`REVOKE ALL ON ALL TABLES IN SCHEMA "${db.schema}" FROM "${role}"`);
      await admin.query(`REVOKE ALL ON SCHEMA "${db.schema}" FROM "${role}"`);
      await admin.query(`DROP ROLE IF EXISTS "${role}"`);
    }
    await admin.end();
    await store.stop();
    await db.drop();
  });

  it('builds the connection string from an RDS secret, or takes it from a SecureString; an URL in the environment wins', async () => {
    store.values.set('rds/app', JSON.stringify({ engine: 'postgres', host: 'db.internal', port: 5432, username: 'app', password: 'p@ss/word', dbname: 'orders' }));
    store.values.set('/queuebox/test/database-url', 'postgres://app:x@db.internal:5432/orders');
    assert.equal((await withDatabaseUrl({ QUEUEBOX_DATABASE_SECRET_ID: 'rds/app' })).QUEUEBOX_DATABASE_URL, 'postgres://app:p%40ss%2Fword@db.internal:5432/orders');
    assert.equal((await withDatabaseUrl({ QUEUEBOX_DATABASE_URL_PARAMETER: '/queuebox/test/database-url' })).QUEUEBOX_DATABASE_URL, 'postgres://app:x@db.internal:5432/orders');
    assert.equal((await withDatabaseUrl({ QUEUEBOX_DATABASE_URL: 'postgres://local', QUEUEBOX_DATABASE_SECRET_ID: 'rds/app' })).QUEUEBOX_DATABASE_URL, 'postgres://local');
  });

  it('takes a stored connection string without the white space around it (a line break a file gave the parameter), from SSM as from Secrets Manager', async () => {
    store.values.set('/queuebox/test/url-with-newline', 'postgres://app:x@db.internal:5432/orders\r\n');
    store.values.set('plain/with-newline', ' postgres://app:x@db.internal:5432/orders\n');
    for (const env of [{ QUEUEBOX_DATABASE_URL_PARAMETER: '/queuebox/test/url-with-newline' }, { QUEUEBOX_DATABASE_SECRET_ID: 'plain/with-newline' }]) {
      const url = (await withDatabaseUrl(env)).QUEUEBOX_DATABASE_URL;
      assert.equal(url, 'postgres://app:x@db.internal:5432/orders', JSON.stringify(env));
      assert.equal(loadConfig({ env: { ...env, QUEUEBOX_DATABASE_URL: url } }).database.url, url, 'the configuration takes it');
    }
  });

  it('the migrate function reads the connection string from the SSM parameter or the secret, as the other functions do', async () => {
    store.values.set('/queuebox/test/migrate-url', url(roles[0]));
    store.values.set('rds/migrate', JSON.stringify({ engine: 'postgres', host: new URL(base).hostname, port: Number(new URL(base).port || 5432), username: roles[0], password, dbname: new URL(base).pathname.slice(1) }));
    const env = { ...process.env };
    try {
      delete process.env.QUEUEBOX_DATABASE_URL;
      delete process.env.DATABASE_URL;
      process.env.QUEUEBOX_DATABASE__SCHEMA = db.schema;
      for (const [key, location] of [['QUEUEBOX_DATABASE_URL_PARAMETER', '/queuebox/test/migrate-url'], ['QUEUEBOX_DATABASE_SECRET_ID', 'rds/migrate']] as const) {
        delete process.env.QUEUEBOX_DATABASE_URL_PARAMETER;
        delete process.env.QUEUEBOX_DATABASE_SECRET_ID;
        process.env[key] = location;
        const before = store.calls.length;
        assert.deepEqual(await migrateHandler({ check: true }, fakeLambdaContext({ timeoutMs: 30_000 })), { upToDate: true, problems: [] }, key);
        assert.ok(store.calls.slice(before).some((call) => call.endsWith(`:${location}`)), `${key}: the store was read`);
      }
    } finally {
      for (const key of Object.keys(process.env)) if (!(key in env)) delete process.env[key];
      Object.assign(process.env, env);
    }
  });

  it('fills each source secret the configuration names from the SSM path, keeping variables already set', async () => {
    const config = parseConfig({
      inbox: {
        sources: {
          stripe: { type: 'http', path: '/stripe', auth: { type: 'stripe', secretEnv: 'STRIPE_WEBHOOK_SECRET' } },
          crm: { type: 'http', path: '/crm', auth: { type: 'bearer', tokenEnv: 'CRM_TOKEN' } },
          open: { type: 'http', path: '/open', auth: { type: 'none' } },
        },
      },
    });
    assert.deepEqual(secretEnvNames(config), ['CRM_TOKEN', 'STRIPE_WEBHOOK_SECRET']);
    store.values.set('/queuebox/test/STRIPE_WEBHOOK_SECRET', 'whsec_from_ssm_0000');
    const secrets = await loadSourceSecrets({ env: { QUEUEBOX_SECRETS_PARAMETER_PATH: '/queuebox/test/', CRM_TOKEN: 'from-env-00000000' }, config });
    assert.deepEqual([await secrets.current('STRIPE_WEBHOOK_SECRET'), await secrets.current('CRM_TOKEN')], ['whsec_from_ssm_0000', 'from-env-00000000']);
    assert.ok(!store.calls.some((c) => c.endsWith('/CRM_TOKEN')), 'a variable already set is not fetched');
  });

  it('a source secret that is neither in the environment nor in SSM (a typo in secretEnv) stops the cold start naming the key', async () => {
    const config = parseConfig({ inbox: { sources: { stripe: { type: 'http', path: '/stripe', auth: { type: 'stripe', secretEnv: 'STRIPE_WEBHOOK_SECERT' } } } } });
    store.values.set('/queuebox/typo/STRIPE_WEBHOOK_SECRET', 'whsec_from_ssm_0000');
    await assert.rejects(
      () => loadSourceSecrets({ env: { QUEUEBOX_SECRETS_PARAMETER_PATH: '/queuebox/typo' }, config }),
      (error: Error) => {
        assert.equal(error.name, 'ConfigError');
        assert.match(error.message, /inbox\.sources\.stripe\.auth\.secretEnv: names environment variable STRIPE_WEBHOOK_SECERT, which is not set, and SSM holds no parameter \/queuebox\/typo\/STRIPE_WEBHOOK_SECERT/);
        return true;
      },
    );
    const pasted = parseConfig({ inbox: { sources: { crm: { type: 'http', path: '/crm', auth: { type: 'bearer', tokenEnv: 'hunter2pass' } } } } });
    await assert.rejects(
      () => loadSourceSecrets({ env: { QUEUEBOX_SECRETS_PARAMETER_PATH: '/queuebox/typo' }, config: pasted }),
      (error: Error) => {
        assert.match(error.message, /inbox\.sources\.crm\.auth\.tokenEnv: .*SSM holds no parameter for it under \/queuebox\/typo/);
        assert.doesNotMatch(error.message, /hunter2pass/, 'a name that may be a password is not printed');
        return true;
      },
    );
  });

  it('caches the secret across invocations and fetches it again when the rotated-out login is refused', async () => {
    store.values.set('queuebox/rotating', url(roles[0]));
    delete process.env.QUEUEBOX_DATABASE_URL;
    delete process.env.DATABASE_URL;
    Object.assign(process.env, { QUEUEBOX_DATABASE_SECRET_ID: 'queuebox/rotating', QUEUEBOX_DATABASE__SCHEMA: db.schema });
    const fetches = () => store.calls.filter((c) => c.endsWith(':queuebox/rotating')).length;
    const ctx = () => fakeLambdaContext({ timeoutMs: 10_000 });
    await reclaimHandler({}, ctx());
    await reclaimHandler({}, ctx());
    assert.equal(fetches(), 1, 'one fetch for two invocations');

    store.values.set('queuebox/rotating', url(roles[1]));
    await admin.query(`ALTER ROLE "${roles[0]}" NOLOGIN`);
    await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [roles[0]]);
    const failures: string[] = [];
    let answer: Awaited<ReturnType<typeof reclaimHandler>> | undefined;
    for (let invocation = 0; invocation < 3 && answer === undefined; invocation++) {
      answer = await reclaimHandler({}, ctx()).catch((error: unknown) => void failures.push(String((error as { code?: string }).code ?? error)));
    }
    assert.ok(answer !== undefined, `a later invocation logs in with the rotated secret (failures: ${failures.join(', ')})`);
    assert.ok(failures.length >= 1, 'the invocation that met the refused login failed');
    assert.equal(fetches(), 2, `fetched again once, bypassing the cache: ${store.calls.join(' ')}`);
    const [who] = await admin.query<{ n: string }>(`SELECT count(*) AS n FROM pg_stat_activity WHERE usename = $1`, [roles[1]]).then((r) => r.rows);
    assert.ok(Number(who!.n) >= 1, 'connected as the new user');
    delete process.env.QUEUEBOX_DATABASE_SECRET_ID;
    delete process.env.QUEUEBOX_DATABASE__SCHEMA;
    process.env.DATABASE_URL = base;
  });
  it('reads the database secret again once it is secrets.maxAgeSeconds old and reconnects with the new credentials, with no refused login', async () => {
    await admin.query(`ALTER ROLE "${roles[0]}" LOGIN`);
    store.values.set('queuebox/aged', url(roles[0]));
    delete process.env.QUEUEBOX_DATABASE_URL;
    delete process.env.DATABASE_URL;
    Object.assign(process.env, { QUEUEBOX_DATABASE_SECRET_ID: 'queuebox/aged', QUEUEBOX_DATABASE__SCHEMA: db.schema, QUEUEBOX_SECRETS__MAX_AGE_SECONDS: '1' });
    const fetches = () => store.calls.filter((c) => c.endsWith(':queuebox/aged')).length;
    const connected = async (role: string) => Number((await admin.query<{ n: string }>(`SELECT count(*) AS n FROM pg_stat_activity WHERE usename = $1`, [role])).rows[0]!.n);
    try {
      await reclaimHandler({}, fakeLambdaContext({ timeoutMs: 10_000 }));
      store.values.set('queuebox/aged', url(roles[1]));
      await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [roles[1]]);
      await reclaimHandler({}, fakeLambdaContext({ timeoutMs: 10_000 }));
      assert.equal(fetches(), 1, 'a secret younger than maxAgeSeconds is not read again');
      await new Promise((resolve) => setTimeout(resolve, 1100));
      await reclaimHandler({}, fakeLambdaContext({ timeoutMs: 10_000 }));
      assert.equal(fetches(), 2, 'read again once 1 s old');
      assert.ok((await connected(roles[1])) >= 1, 'the new connection logs in with the rotated credentials');
    } finally {
      for (const key of ['QUEUEBOX_DATABASE_SECRET_ID', 'QUEUEBOX_DATABASE__SCHEMA', 'QUEUEBOX_SECRETS__MAX_AGE_SECONDS']) delete process.env[key];
      process.env.DATABASE_URL = base;
    }
  });

  it('a refused login reads the database secret again at most once per secrets.minRefetchSeconds, however many invocations fail', async () => {
    for (const role of roles) await admin.query(`ALTER ROLE "${role}" NOLOGIN`);
    await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY($1)`, [[...roles]]);
    store.values.set('queuebox/locked', url(roles[0]));
    delete process.env.QUEUEBOX_DATABASE_URL;
    delete process.env.DATABASE_URL;
    Object.assign(process.env, { QUEUEBOX_DATABASE_SECRET_ID: 'queuebox/locked', QUEUEBOX_DATABASE__SCHEMA: db.schema });
    const fetches = () => store.calls.filter((c) => c.endsWith(':queuebox/locked')).length;
    try {
      for (let invocation = 0; invocation < 5; invocation++) {
        await assert.rejects(() => reclaimHandler({}, fakeLambdaContext({ timeoutMs: 10_000 })));
      }
      assert.equal(fetches(), 2, `the first read and one forced read for five refused invocations: ${store.calls.join(' ')}`);
    } finally {
      for (const key of ['QUEUEBOX_DATABASE_SECRET_ID', 'QUEUEBOX_DATABASE__SCHEMA']) delete process.env[key];
      process.env.DATABASE_URL = base;
    }
  });
});
