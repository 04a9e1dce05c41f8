/**
 * `queuebox inbox put --key`: the key is used wherever the source takes a key from the request (a
 * key header, or `X-Idempotency-Key` before the body on an unsigned source), and refused — exit 1,
 * nothing stored, saying where the key comes from — for an http source that would ignore it: one
 * that keys on its signed body (stripe, a signed source with idempotencyKeyPath) or sets
 * `idempotency: none` / `body-digest`.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify } from 'yaml';
import { runCli } from '../../bin/cli-program.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

describe('queuebox inbox put --key', () => {
  let db: TestDatabase;
  let dir: string;
  let configFile: string;
  let env: Record<string, string>;

  before(async () => {
    db = await createTestDatabase();
    dir = mkdtempSync(join(tmpdir(), 'qb-inbox-put-key-'));
    configFile = join(dir, 'queuebox.yml');
    writeFileSync(
      configFile,
      stringify({
        database: { schema: db.schema },
        observability: { logLevel: 'SILENT' },
        inbox: {
          sources: {
            stripe: { type: 'http', path: '/stripe', consumption: 'pull', auth: { type: 'stripe', secretEnv: 'PUT_KEY_STRIPE_SECRET' } },
            signed: { type: 'http', path: '/signed', consumption: 'pull', auth: { type: 'hmac', secretEnv: 'PUT_KEY_HMAC_SECRET' }, idempotencyKeyPath: '$.eventId' },
            digest: { type: 'http', path: '/digest', consumption: 'pull', auth: { type: 'bearer', tokenEnv: 'PUT_KEY_TOKEN' }, idempotency: 'body-digest' },
            open: { type: 'http', path: '/open', consumption: 'pull', auth: { type: 'none' }, idempotencyKeyPath: '$.eventId' },
            github: { type: 'http', path: '/github', consumption: 'pull', auth: { type: 'github', secretEnv: 'PUT_KEY_GITHUB_SECRET' } },
          },
        },
      }),
    );
    env = {
      QUEUEBOX_DATABASE_URL: db.url,
      PUT_KEY_STRIPE_SECRET: 'whsec_0123456789abcdef0123456789',
      PUT_KEY_HMAC_SECRET: 'hmac-secret-for-put-key-test',
      PUT_KEY_TOKEN: 'token-for-put-key-test',
      PUT_KEY_GITHUB_SECRET: 'github-secret-for-put-key-test',
    };
  });
  after(async () => {
    rmSync(dir, { recursive: true, force: true });
    await db.drop();
  });

  async function put(source: string, body: string, key?: string) {
    let stdout = '';
    let stderr = '';
    const keyArgs = key === undefined ? [] : ['--key', key];
    const code = await runCli(['--config', configFile, 'inbox', 'put', '--source', source, ...keyArgs, '--body', body, '--json'], {
      stdout: (t) => (stdout += t),
      stderr: (t) => (stderr += t),
      env,
    });
    return { code, stdout, stderr };
  }
  const keys = async (source: string) =>
    (await db.query<{ idempotency_key: string }>(`SELECT idempotency_key FROM "${db.schema}".inbox WHERE source = $1 ORDER BY created_at, id`, [source])).map((r) => r.idempotency_key);

  it('refuses --key for a source that keys on its signed body, naming where the key comes from, and stores nothing', async () => {
    const refused = await put('stripe', '{"id":"evt_A","type":"charge.succeeded"}', 'k1');
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /--key cannot be used with source stripe: it takes the idempotency key from the signed body, at \$\.id: put the key there/);
    const signed = await put('signed', '{"eventId":"e-1"}', 'k1');
    assert.equal(signed.code, 1);
    assert.match(signed.stderr, /--key cannot be used with source signed: it takes the idempotency key from the signed body, at \$\.eventId/);
    assert.deepEqual([await keys('stripe'), await keys('signed')], [[], []]);
    // Without --key the body's id is the key, and a second delivery of it is a duplicate.
    const first = await put('stripe', '{"id":"evt_A","type":"charge.succeeded"}');
    assert.equal(first.code, 0, first.stderr);
    assert.equal((JSON.parse(first.stdout) as { idempotencyKey: string }).idempotencyKey, 'evt_A');
    const again = await put('stripe', '{"id":"evt_A","type":"charge.succeeded"}');
    assert.equal((JSON.parse(again.stdout) as { outcome: string }).outcome, 'duplicate');
    assert.deepEqual(await keys('stripe'), ['evt_A']);
  });

  it('refuses --key for a source whose key is the body digest', async () => {
    const refused = await put('digest', '{"n":1}', 'k1');
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /--key cannot be used with source digest: its idempotency key is the SHA-256 of the body \(idempotency: body-digest\)/);
    assert.deepEqual(await keys('digest'), []);
  });

  it('uses --key on an unsigned source over the body, and as the key header of a github source; the same key again is a duplicate', async () => {
    const open = await put('open', '{"eventId":"from-body"}', 'given-1');
    assert.equal(open.code, 0, open.stderr);
    assert.equal((JSON.parse(open.stdout) as { idempotencyKey: string }).idempotencyKey, 'given-1');
    const openAgain = await put('open', '{"eventId":"other-body"}', 'given-1');
    assert.equal((JSON.parse(openAgain.stdout) as { outcome: string }).outcome, 'duplicate');
    const github = await put('github', '{"action":"opened"}', 'delivery-1');
    assert.equal(github.code, 0, github.stderr);
    assert.equal((JSON.parse(github.stdout) as { idempotencyKey: string }).idempotencyKey, 'delivery-1');
    assert.deepEqual([await keys('open'), await keys('github')], [['given-1'], ['delivery-1']]);
  });

  it('refuses an empty --key (an unset variable in `--key "$EVENT_ID"`) instead of storing the message under a new key', async () => {
    for (const source of ['open', 'github']) {
      const refused = await put(source, '{"eventId":"empty-key"}', '');
      assert.equal(refused.code, 1, source);
      assert.match(refused.stderr, /--key is empty: give the idempotency key, or leave --key out/, source);
    }
    assert.deepEqual([await keys('open'), await keys('github')], [['given-1'], ['delivery-1']], 'nothing stored');
  });
});
