/**
 * Operator mistakes in the configuration stop start-up with the key named, and no secret is ever
 * printed back: checks that used to run late (or never) now run when the configuration loads.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { LONGEST_DERIVED_SUFFIX, MAX_TABLE_NAME_LENGTH } from '../../lib/config/cross-check-config.ts';
import { loadConfig, parseConfig, requireSecret } from '../../lib/config/load-config.ts';
import type { ConfigInput } from '../../lib/config/schema.ts';
import { ConfigError } from '../../lib/errors.ts';
import { createHttpReceiver } from '../../lib/inbox/http-receiver.ts';
import { createLogger } from '../../lib/observability/logger.ts';

const hmac = { type: 'hmac' as const, secretEnv: 'HOOK_SECRET' };

function refusal(input: ConfigInput): ConfigError {
  try {
    parseConfig(input);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  assert.fail(`accepted: ${JSON.stringify(input)}`);
}

describe('configuration validated whole at load', () => {
  const dir = mkdtempSync(join(tmpdir(), 'queuebox-config-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('two http sources on one path are refused, naming both (an open source can no longer replace a signed one)', () => {
    const error = refusal({ inbox: { sources: { signed: { type: 'http', path: '/hooks', auth: hmac, idempotencyKeyPath: '$.id' }, open: { type: 'http', path: '/hooks', auth: { type: 'none' } } } } });
    assert.equal(error.key, 'inbox.sources.open.path');
    assert.match(error.message, /POST \/inbox\/hooks is already the path of source signed/);
  });

  it('two sqs sources on one queue are refused (a queue name defaults to the source name)', () => {
    const error = refusal({ inbox: { sources: { a: { type: 'sqs', queueName: 'orders' }, orders: { type: 'sqs' } } } });
    assert.equal(error.key, 'inbox.sources.orders.queueName');
    assert.match(error.message, /queue orders is already received by source a/);
  });

  it('an http source without auth is refused; `type: none` must be explicit', () => {
    const error = refusal({ inbox: { sources: { open: { type: 'http', path: '/open' } } } });
    assert.equal(error.key, 'inbox.sources.open.auth');
    assert.match(error.message, /type: none/);
    assert.equal(parseConfig({ inbox: { sources: { open: { type: 'http', path: '/open', auth: { type: 'none' } } } } }).inbox.sources.open!.auth?.type, 'none');
  });

  it('malformed JSONPaths, filters and scripts are refused at load; the supported forms load', () => {
    for (const [path, key] of [['$.[', 'idempotencyKeyPath'], ['$..[', 'eventTypePath'], ['id', 'aggregateIdPath'], ['$.a[?(@.b)]', 'correlationIdPath'], ['$.a[(@.length-1)]', 'delayPath'], ['$', 'idempotencyKeyPath']] as const) {
      const error = refusal({ inbox: { sources: { feed: { type: 'sqs', [key]: path } } } });
      assert.equal(error.key, `inbox.sources.feed.${key}`, path);
    }
    const ok = parseConfig({ inbox: { sources: { feed: { type: 'sqs', idempotencyKeyPath: '$.data.object.id', eventTypePath: '$..type', aggregateIdPath: "$['order id']", correlationIdPath: '$.items[0].trace', delayPath: '$.meta.*' } } } });
    assert.equal(ok.inbox.sources.feed!.idempotencyKeyPath, '$.data.object.id');
  });

  it('routes to inherited names (constructor, toString, __proto__) are refused like any unknown destination', () => {
    for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
      const error = refusal({ outbox: { routes: [{ topicPattern: '**', destination: name }] } });
      assert.equal(error.key, 'outbox.routes.0.destination', name);
    }
  });

  it('unknown or malformed topic-template placeholders are refused at load, for the inbox and for a source', () => {
    assert.equal(refusal({ inbox: { topicTemplate: '{{ source }}.{{ evenType }}' } }).key, 'inbox.topicTemplate');
    assert.equal(refusal({ inbox: { topicTemplate: '{{ source }.x' } }).key, 'inbox.topicTemplate');
    assert.equal(refusal({ inbox: { sources: { feed: { type: 'sqs', topicTemplate: 'feed.{{ type }}' } } } }).key, 'inbox.sources.feed.topicTemplate');
  });

  it('table names too long for the identifiers QueueBox derives from them are refused naming the table key', () => {
    const long = 't'.repeat(MAX_TABLE_NAME_LENGTH + 1);
    const error = refusal({ tables: { inbox: long } });
    assert.equal(error.key, 'tables.inbox');
    assert.match(error.message, new RegExp(`${long}${LONGEST_DERIVED_SUFFIX}`));
    assert.equal(parseConfig({ tables: { inbox: 't'.repeat(MAX_TABLE_NAME_LENGTH) } }).tables.inbox.length, MAX_TABLE_NAME_LENGTH);
  });

  it('every name the migrations derive from a table fits within the longest derived suffix', () => {
    for (const file of ['lib/db/postgres/migrations.ts', 'lib/db/sqlserver/migrations.ts', 'lib/db/postgres/names.ts']) {
      const suffixes = [...readFileSync(file, 'utf8').matchAll(/\$\{[A-Za-z.]+\}(_[a-z_]+)/g)].map((m) => m[1]!);
      assert.ok(suffixes.length > 0, file);
      for (const suffix of suffixes) assert.ok(suffix.length <= LONGEST_DERIVED_SUFFIX.length, `${file}: ${suffix}`);
    }
  });

  it('a secret pasted where an environment variable name belongs is refused and never printed', () => {
    for (const secret of ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'ghp_16C7e42F292c6912E7710c838347Ae178B4a', 'sk_live_51H8x2yAbCdEfGhIjKlMnOp', 'Kx9fQ2mZ7pL4vR8tW1yB6nC3']) {
      const error = refusal({ inbox: { sources: { hooks: { type: 'http', path: '/h', auth: { type: 'hmac', secretEnv: secret } } } } });
      assert.equal(error.key, 'inbox.sources.hooks.auth.secretEnv');
      assert.ok(!error.message.includes(secret), 'the secret is not echoed');
      assert.throws(() => requireSecret({ [secret]: 'x' }, secret, 'k'), (e: unknown) => e instanceof ConfigError && !e.message.includes(secret));
    }
    assert.equal(parseConfig({ inbox: { sources: { hooks: { type: 'http', path: '/h', auth: { type: 'hmac', secretEnv: 'STRIPE_WEBHOOK_SECRET_2024' }, idempotency: 'none' } } } }).inbox.sources.hooks!.path, '/h');
  });

  it('a YAML syntax error shows the line and column, not the line with its password', () => {
    const path = join(dir, 'broken.yml');
    writeFileSync(path, 'database:\n  url: postgres://app:Hunter2Secret@db/app\n\tschema: x\n');
    assert.throws(
      () => loadConfig({ path, env: {} }),
      (e: unknown) => e instanceof ConfigError && /line 3, column 1/.test(e.message) && !e.message.includes('Hunter2Secret') && !e.message.includes('postgres://'),
    );
    writeFileSync(path, 'database: { url: "postgres://app:Hunter2Secret@db/app"\n');
    assert.throws(() => loadConfig({ path, env: {} }), (e: unknown) => e instanceof ConfigError && /line \d+, column \d+/.test(e.message) && !e.message.includes('Hunter2Secret'));
  });
  it('weak auth settings are refused naming the key: an unbounded tolerance, a secret variable the runtime sets', () => {
    for (const type of ['hmac', 'stripe'] as const) {
      const error = refusal({ inbox: { sources: { hooks: { type: 'http', path: '/h', auth: { type, secretEnv: 'HOOK_SECRET', toleranceSeconds: 86_400 }, idempotencyKeyPath: '$.id' } } } });
      assert.equal(error.key, 'inbox.sources.hooks.auth.toleranceSeconds', type);
      assert.match(error.message, /at most 900 seconds/);
    }
    const auths = [
      [{ type: 'hmac', secretEnv: 'AWS_REGION' }, 'secretEnv'],
      [{ type: 'github', secretEnv: 'AWS_LAMBDA_FUNCTION_NAME' }, 'secretEnv'],
      [{ type: 'bearer', tokenEnv: '_HANDLER' }, 'tokenEnv'],
      [{ type: 'api-key', keyEnv: 'PATH' }, 'keyEnv'],
      [{ type: 'stripe', secretEnv: 'AWS_DEFAULT_REGION' }, 'secretEnv'],
    ] as const;
    for (const [auth, key] of auths) {
      const error = refusal({ inbox: { sources: { hooks: { type: 'http', path: '/h', auth, idempotency: 'none' } } } });
      assert.equal(error.key, `inbox.sources.hooks.auth.${key}`, JSON.stringify(auth));
      assert.match(error.message, /runtime sets for its own use/);
    }
  });

  it('a blank or short source secret stops the receiver at cold start, naming the key and never showing the value', () => {
    const config = parseConfig({ inbox: { sources: { hooks: { type: 'http', path: '/h', auth: { type: 'hmac', secretEnv: 'HOOK_SECRET' }, idempotency: 'none' } } } });
    const build = (value: string) => () => createHttpReceiver({ config, driver: {} as never, logger: createLogger({ serviceName: 't', logLevel: 'SILENT' }), env: { HOOK_SECRET: value } });
    assert.throws(build(' '), (e: unknown) => e instanceof ConfigError && e.key === 'inbox.sources.hooks.auth.secretEnv' && /blank/.test(e.message));
    assert.throws(build('tooShort-secret'), (e: unknown) => e instanceof ConfigError && e.key === 'inbox.sources.hooks.auth.secretEnv' && /shorter than 16/.test(e.message) && !e.message.includes('tooShort'));
    assert.doesNotThrow(build('a-long-enough-secret'));
  });

  it('a short password pasted into an …Env key is never echoed, at load or at cold start', () => {
    for (const password of ['hunter2', 'Passw0rd', 'QwErTy_99']) {
      assert.throws(() => requireSecret({}, password, 'database.urlEnv'), (e: unknown) => e instanceof ConfigError && e.key === 'database.urlEnv' && !e.message.includes(password));
      const config = parseConfig({ inbox: { sources: { crm: { type: 'http', path: '/crm', auth: { type: 'bearer', tokenEnv: password } } } } });
      assert.throws(
        () => createHttpReceiver({ config, driver: {} as never, logger: createLogger({ serviceName: 't', logLevel: 'SILENT' }), env: {} }),
        (e: unknown) => e instanceof ConfigError && e.key === 'inbox.sources.crm.auth.tokenEnv' && !e.message.includes(password) && /not set/.test(e.message),
      );
    }
    assert.throws(() => requireSecret({}, 'APP_DATABASE_URL', 'database.urlEnv'), /names environment variable APP_DATABASE_URL, which is not set/);
  });
});
