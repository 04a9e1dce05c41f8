/**
 * What the configuration file accepts (docs/configuration.md): YAML 1.1 merge keys, with duplicate
 * keys still refused; a key that does not apply to a source's `type` refused naming it; and every
 * millisecond duration at most MAX_TIMER_MS, the longest delay a timer or a database timeout
 * takes (the shared `sleep` clamps a longer one instead of firing after 1 ms).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../lib/config/load-config.ts';
import { ConfigError } from '../../lib/errors.ts';
import { sleep } from '../../lib/runtime/deadline.ts';
import { MAX_TIMER_MS } from '../../lib/runtime/timer-limit.ts';
import { configKeys } from '../../infra/reference-docs.ts';

const base = { database: { schema: 'file_rules_test' } };

function refusal(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof ConfigError, `expected ConfigError, got ${String(error)}`);
    return error;
  }
  assert.fail('expected a ConfigError');
}

describe('YAML merge keys', () => {
  let dir: string;
  before(() => (dir = mkdtempSync(join(tmpdir(), 'qb-merge-keys-'))));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const file = (text: string) => {
    const path = join(dir, `${Math.random().toString(36).slice(2)}.yml`);
    writeFileSync(path, text);
    return path;
  };

  it('copies the keys of an anchored mapping; keys written next to the merge key win', () => {
    const config = loadConfig({
      path: file(`destinations:
  orders: &sqs { type: sqs, queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders', region: eu-west-1 }
  billing:
    <<: *sqs
    queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/billing'
`),
      env: {},
    });
    assert.deepEqual(config.destinations.billing, { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/billing', region: 'eu-west-1', callTimeoutMs: 10_000 });
    assert.deepEqual(config.destinations.orders, { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders', region: 'eu-west-1', callTimeoutMs: 10_000 });
  });

  it('merges a list of anchors (the first one wins a key both have), and a merged key the entry does not allow is refused naming it', () => {
    const config = loadConfig({
      path: file(`destinations:
  a: &a { type: sqs, queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/a', region: eu-west-1 }
  b: &b { type: sqs, queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/b', endpoint: 'http://127.0.0.1:4566' }
  c: { <<: [*b, *a] }
`),
      env: {},
    });
    assert.deepEqual(config.destinations.c, { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/b', endpoint: 'http://127.0.0.1:4566', region: 'eu-west-1', callTimeoutMs: 10_000 });
    const error = refusal(() =>
      loadConfig({
        path: file(`destinations:
  bus: &bus { type: eventbridge, eventBusName: orders, source: shop }
  queue: { <<: *bus, type: sqs, queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/q' }
`),
        env: {},
      }),
    );
    assert.deepEqual(error.issues.map((i) => i.key).sort(), ['destinations.queue.eventBusName', 'destinations.queue.source']);
  });

  it('still refuses a key written twice in one mapping', () => {
    const error = refusal(() => loadConfig({ path: file('outbox:\n  batchSize: 10\n  batchSize: 20\n'), env: {} }));
    assert.equal(error.key, '(file)');
    assert.match(error.message, /DUPLICATE_KEY/);
  });
});

describe('keys that do not apply to a source type', () => {
  it('refuses path on an sqs source and queueName on an http source, naming the key', () => {
    const sqs = refusal(() => loadConfig({ input: { ...base, inbox: { sources: { partner: { type: 'sqs', path: '/partner' } } } }, env: {} }));
    assert.deepEqual(sqs.issues.map((i) => i.key), ['inbox.sources.partner.path']);
    assert.match(sqs.message, /inbox\.sources\.partner\.path: is only for http sources/);
    const http = refusal(() =>
      loadConfig({ input: { ...base, inbox: { sources: { hooks: { type: 'http', path: '/hooks', queueName: 'hooks-queue', auth: { type: 'none' } } } } }, env: {} }),
    );
    assert.deepEqual(http.issues.map((i) => i.key), ['inbox.sources.hooks.queueName']);
    assert.match(http.message, /inbox\.sources\.hooks\.queueName: is only for sqs sources: an http source receives POST \/inbox\/hooks/);
  });

  it('refuses a source or destination name against its rule, quoting the name (which may hold a dot)', () => {
    const source = refusal(() => loadConfig({ input: { ...base, inbox: { sources: { Foo: { type: 'sqs' } } } }, env: {} }));
    assert.deepEqual(source.issues.map((i) => i.key), ['inbox.sources.Foo']);
    assert.match(source.message, /inbox\.sources\.Foo: the name "Foo" is not valid: source names are 1 to 63 lower-case letters, digits, - and _, starting with a letter or digit/);
    const leading = refusal(() => loadConfig({ input: { ...base, inbox: { sources: { '-feed': { type: 'sqs' } } } }, env: {} }));
    assert.match(leading.message, /inbox\.sources\.-feed: the name "-feed" is not valid: .*starting with a letter or digit/);
    const destination = refusal(() => loadConfig({ input: { ...base, destinations: { 'my.dest': { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/q' } } } as never, env: {} }));
    assert.match(destination.message, /destinations\.my\.dest: the name "my\.dest" is not valid: destination names are 1 to 64 letters, digits, - and _/);
  });

  it('refuses a key of the other destination type, naming it', () => {
    const error = refusal(() =>
      loadConfig({ input: { ...base, destinations: { q: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/q', eventBusName: 'orders' } } } as never, env: {} }),
    );
    assert.equal(error.key, 'destinations.q.eventBusName');
  });
});

describe('durations in milliseconds', () => {
  const keys: Array<[string, Record<string, unknown>]> = [
    ['database.statementTimeoutMs', { database: { statementTimeoutMs: MAX_TIMER_MS + 1 } }],
    ['database.idleInTransactionTimeoutMs', { database: { idleInTransactionTimeoutMs: MAX_TIMER_MS + 1 } }],
    ['database.requestTimeoutMs', { database: { requestTimeoutMs: MAX_TIMER_MS + 1 } }],
    ['database.connectTimeoutMs', { database: { connectTimeoutMs: MAX_TIMER_MS + 1 } }],
    ['outbox.pollIntervalMs', { outbox: { pollIntervalMs: MAX_TIMER_MS + 1 } }],
    ['outbox.maxPollIntervalMs', { outbox: { maxPollIntervalMs: MAX_TIMER_MS + 1 } }],
    ['outbox.retryBaseDelayMs', { outbox: { retryBaseDelayMs: MAX_TIMER_MS + 1 } }],
    ['outbox.claimTimeoutMs', { outbox: { claimTimeoutMs: MAX_TIMER_MS + 1 } }],
    ['outbox.shutdownTimeoutMs', { outbox: { shutdownTimeoutMs: MAX_TIMER_MS + 1 } }],
    ['inbox.relay.pollIntervalMs', { inbox: { relay: { pollIntervalMs: MAX_TIMER_MS + 1 } } }],
    ['inbox.relay.maxPollIntervalMs', { inbox: { relay: { maxPollIntervalMs: MAX_TIMER_MS + 1 } } }],
    ['inbox.relay.claimTimeoutMs', { inbox: { relay: { claimTimeoutMs: MAX_TIMER_MS + 1 } } }],
    ['inbox.relay.shutdownTimeoutMs', { inbox: { relay: { shutdownTimeoutMs: MAX_TIMER_MS + 1 } } }],
    ['inbox.relay.retryBaseDelayMs', { inbox: { relay: { retryBaseDelayMs: MAX_TIMER_MS + 1 } } }],
    ['pull.leaseMs', { pull: { leaseMs: MAX_TIMER_MS + 1 } }],
    ['pull.pollMs', { pull: { pollMs: MAX_TIMER_MS + 1 } }],
    ['pull.retry.baseDelayMs', { pull: { retry: { baseDelayMs: MAX_TIMER_MS + 1 } } }],
    ['pull.retry.maxDelayMs', { pull: { retry: { maxDelayMs: MAX_TIMER_MS + 1 } } }],
    ['lambda.deadlineMarginMs', { lambda: { deadlineMarginMs: MAX_TIMER_MS + 1 } }],
    ['destinations.<name>(type: sqs).callTimeoutMs', { destinations: { d: { type: 'sqs', queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/d', callTimeoutMs: MAX_TIMER_MS + 1 } } }],
    ['destinations.<name>(type: eventbridge).callTimeoutMs', { destinations: { d: { type: 'eventbridge', eventBusName: 'bus', source: 'shop', callTimeoutMs: MAX_TIMER_MS + 1 } } }],
  ];
  it('the list below holds every key of the schema that ends in Ms', () => {
    assert.deepEqual(keys.map(([key]) => key).sort(), configKeys().map((row) => row.key).filter((key) => key.endsWith('Ms')).sort());
  });

  for (const [key, input] of keys) {
    it(`refuses ${key} above ${MAX_TIMER_MS}, naming it`, () => {
      const error = refusal(() => loadConfig({ input: { ...input, database: { ...base.database, ...(input.database as object) } } as never, env: {} }));
      assert.equal(error.key, key.replace(/<name>\(type: \w+\)/, 'd'), error.message);
      // The margin and a destination's call timeout have smaller limits of their own.
      const limit = key === 'lambda.deadlineMarginMs' ? /must be less than 899000 ms/ : key.endsWith('.callTimeoutMs') ? /from 100 to 900000/ : /at most 2147483647 ms/;
      assert.match(error.issues[0]!.message, limit);
    });
  }

  it('refuses a lambda.deadlineMarginMs that leaves even Lambda\'s longest timeout (900 s) no second to claim in, naming it', () => {
    for (const deadlineMarginMs of [899_000, 900_000]) {
      const error = refusal(() => loadConfig({ input: { ...base, lambda: { deadlineMarginMs } }, env: {} }));
      assert.equal(error.key, 'lambda.deadlineMarginMs');
      assert.match(error.issues[0]!.message, /must be less than 899000 ms: Lambda's longest timeout \(900 s\) less the 1 s a poller or relay pass needs to claim/);
    }
    assert.equal(loadConfig({ input: { ...base, lambda: { deadlineMarginMs: 898_999 } }, env: {} }).lambda.deadlineMarginMs, 898_999);
  });

  it('refuses a lambda.deadlineMarginMs below 1000 ms, which leaves a pass stopped at its deadline no time to write its settles, naming it', () => {
    for (const deadlineMarginMs of [0, 999]) {
      const error = refusal(() => loadConfig({ input: { ...base, lambda: { deadlineMarginMs } }, env: {} }));
      assert.equal(error.key, 'lambda.deadlineMarginMs');
      assert.match(error.issues[0]!.message, /must be at least 1000 ms: the time a pass stopped at its deadline has to write the settles of what it delivered/);
    }
    const fromEnv = refusal(() => loadConfig({ input: base, env: { QUEUEBOX_LAMBDA__DEADLINE_MARGIN_MS: '0' } }));
    assert.equal(fromEnv.key, 'lambda.deadlineMarginMs');
    assert.match(fromEnv.message, /QUEUEBOX_LAMBDA__DEADLINE_MARGIN_MS/);
    assert.equal(loadConfig({ input: { ...base, lambda: { deadlineMarginMs: 1000 } }, env: {} }).lambda.deadlineMarginMs, 1000);
  });

  it('accepts MAX_TIMER_MS itself, and an override above it is refused naming the variable', () => {
    assert.equal(loadConfig({ input: { ...base, pull: { pollMs: MAX_TIMER_MS } }, env: {} }).pull.pollMs, MAX_TIMER_MS);
    const error = refusal(() => loadConfig({ input: base, env: { QUEUEBOX_PULL__POLL_MS: '2147483648' } }));
    assert.match(error.message, /pull\.pollMs \(from QUEUEBOX_PULL__POLL_MS\): must be at most 2147483647 ms/);
  });

  it('sleep clamps a delay above MAX_TIMER_MS instead of firing at once', async () => {
    for (const ms of [MAX_TIMER_MS + 1, Number.POSITIVE_INFINITY]) {
      const stop = new AbortController();
      const started = Date.now();
      const timer = setTimeout(() => stop.abort(), 150);
      await sleep(ms, stop.signal);
      clearTimeout(timer);
      assert.ok(Date.now() - started >= 140, `sleep(${ms}) ended after ${Date.now() - started} ms`);
    }
  });
});
