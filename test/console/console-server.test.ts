/**
 * The console without a browser: HTTP-level guards (Host, Origin, token, methods, forms),
 * escaping, redaction, the blocked-reason wording, and `queuebox console` start-up (bind address
 * warning, the local run's database, a clear error when there is no database).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { attemptText } from '../../lib/console/attempt-text.ts';
import { blockedReason } from '../../lib/console/blocked-reason.ts';
import type { ConsoleServer } from '../../lib/console/console-server.ts';
import { escapeHtml, html } from '../../lib/console/html.ts';
import { configuredSecrets, createRedactor } from '../../lib/console/redact-row.ts';
import { runConsole } from '../../lib/console/run-console.ts';
import { terminalText } from '../../lib/operations/terminal-text.ts';
import type { ConsoleBlockedHead } from '../../lib/db/driver.ts';
import { ConfigError, UsageError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { withConsoleServer } from './console-fixture.ts';

/** One raw HTTP request (node:http lets a test set Host and Origin as a hostile page would). */
function call(url: string, options: { method?: string; path?: string; headers?: Record<string, string>; body?: string }) {
  const target = new URL(options.path ?? '/', url);
  return new Promise<{ status: number; headers: Record<string, unknown>; body: string }>((resolve, reject) => {
    const req = request({ host: target.hostname, port: target.port, path: target.pathname + target.search, method: options.method ?? 'GET', headers: options.headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

const head = (over: Partial<ConsoleBlockedHead>): ConsoleBlockedHead => ({
  id: 'x', label: 't', key: 'k', attempt: 0, claimedAt: null, leaseExpiresAt: null, leaseLeftMs: 0, state: 'pending', maxAttempts: 5,
  scheduledAt: new Date(), dueInMs: 0, lastError: null, updatedAt: new Date(), waitingBehind: 1, ...over,
});

describe('console pieces', () => {
  it('html escapes every interpolated value, nested arrays included, and keeps built fragments', () => {
    assert.equal(escapeHtml(`<a href="x" onclick='y'>&\``), '&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;&#96;');
    const inner = html`<b>${'<i>'}</b>`;
    assert.equal(html`<p title="${'"><script>'}">${[inner, '<u>', null, false, 3]}</p>`.text, '<p title="&quot;&gt;&lt;script&gt;"><b>&lt;i&gt;</b>&lt;u&gt;3</p>');
  });

  it('html writes bidirectional formatting characters as a visible \\uXXXX (as terminalText does) and keeps right-to-left text', () => {
    const text = 'a\u202Eb\u202Ac\u2066d\u2069e\u200Ff\u061Cg';
    assert.equal(escapeHtml(text), 'a\\u202eb\\u202ac\\u2066d\\u2069e\\u200ff\\u061cg');
    assert.equal(escapeHtml(text), terminalText(text), 'the console and the CLI show them alike');
    assert.equal(html`<td>${'שלום עולם'}</td>`.text, '<td>שלום עולם</td>');
  });

  it('the redactor masks secret-named keys, URL passwords, bearer tokens and the configured secrets anywhere', () => {
    const secrets = configuredSecrets({ inbox: { sources: { s: { auth: { type: 'hmac', secretEnv: 'HOOK_SECRET' } } } }, database: { urlEnv: 'NOPE' } }, { HOOK_SECRET: 'whsec_abcdef123', NOPE: 'x' });
    assert.ok(secrets.includes('whsec_abcdef123'), 'the configured secret');
    assert.ok(!secrets.includes('x') && secrets.every((s) => s.length >= 6), 'short values are not treated as secrets');
    const r = createRedactor(secrets);
    assert.deepEqual(r.value({ password: 'p4ss', nested: { Authorization: 'Bearer abcdefgh' }, list: ['echo whsec_abcdef123 back'], n: 1, ok: 'plain' }), {
      password: '***', nested: { Authorization: '***' }, list: ['echo *** back'], n: 1, ok: 'plain',
    });
    assert.equal(r.text('connect postgres://app:hunter2@db/app failed; Bearer abcdefghijk'), 'connect postgres://***@db/app failed; Bearer ***');
    assert.equal(r.text(null), '');
  });

  it('blocked heads are explained in words: expired lease, poison, retry backing off, scheduled', () => {
    assert.equal(blockedReason(head({ state: 'processing', leaseLeftMs: -65_000 })).cause, 'expired-lease');
    assert.match(blockedReason(head({ state: 'processing', leaseLeftMs: -65_000 })).text, /invocation that died: expired 1 min 5 s ago/);
    assert.match(blockedReason(head({ attempt: 3 })).text, /^poison row: 3 of 5 attempts failed and it keeps failing; attempt 4 of 5 due now$/);
    assert.match(blockedReason(head({ attempt: 1, dueInMs: 30_000 })).text, /^retry backing off: 1 of 5 attempts failed; attempt 2 of 5 in 30 s$/);
    assert.match(blockedReason(head({ attempt: 4, dueInMs: 9_000 })).text, /^poison row: 4 of 5 attempts failed and it keeps failing; attempt 5 of 5 in 9 s$/, 'the last attempt is numbered as the logs number it');
    assert.match(blockedReason(head({ attempt: 1, dueInMs: 30_000, maxAttempts: null })).text, /^retry backing off: 1 attempt failed; attempt 2 in 30 s$/);
    assert.match(blockedReason(head({ attempt: 0, dueInMs: 7_200_000, maxAttempts: null })).text, /^scheduled in the future: first attempt in 2 h 0 min$/);
  });
});

describe('console attempt text', () => {
  it('numbers attempts as the logs and last_error do: the attempt a row is on, waits for or ended with, of its max_attempts', () => {
    assert.equal(attemptText({ state: 'pending', attempt: 0, maxAttempts: 5 }), 'attempt 1 of 5 next');
    assert.equal(attemptText({ state: 'pending', attempt: 2, maxAttempts: 5 }), 'attempt 3 of 5 next (2 failed)');
    assert.equal(attemptText({ state: 'processing', attempt: 4, maxAttempts: 5 }), 'attempt 5 of 5 in flight');
    assert.equal(attemptText({ state: 'dead', attempt: 4, maxAttempts: 5 }), 'attempt 5 of 5', 'a row dead after its last delivery');
    assert.equal(attemptText({ state: 'sent', attempt: 0, maxAttempts: 5 }), 'attempt 1 of 5');
    assert.equal(attemptText({ state: 'processed', attempt: 1, maxAttempts: null }), 'attempt 2', 'inbox rows carry no maximum');
  });
});

describe('console server guards', () => {
  let server: ConsoleServer;
  withConsoleServer({ allowActions: true }, (_db, s) => {
    server = s;
  });
  const origin = () => server.url;

  it('pages carry a strict Content-Security-Policy and no-store', async () => {
    const res = await call(server.url, {});
    assert.equal(res.status, 200);
    assert.match(String(res.headers['content-security-policy']), /default-src 'none'; script-src 'self'/);
    assert.match(String(res.headers['content-security-policy']), /frame-ancestors 'none'/);
    assert.equal(res.headers['cache-control'], 'no-store');
  });

  it('a request naming another host (DNS rebinding) is refused with 421', async () => {
    const res = await call(server.url, { headers: { host: 'attacker.example' } });
    assert.equal(res.status, 421);
    assert.ok(!res.body.includes('<table'), 'no data');
    assert.equal((await call(server.url, { headers: { host: `localhost:${new URL(server.url).port}` } })).status, 200);
  });

  it('a POST needs this console as Origin (or Referer) and the form token', async () => {
    const form = { 'content-type': 'application/x-www-form-urlencoded' };
    const none = await call(server.url, { method: 'POST', path: '/replay', headers: form, body: 'ids=x' });
    assert.equal(none.status, 403);
    const foreign = await call(server.url, { method: 'POST', path: '/replay', headers: { ...form, origin: 'http://127.0.0.1:1' }, body: 'ids=x' });
    assert.equal(foreign.status, 403);
    const noToken = await call(server.url, { method: 'POST', path: '/replay', headers: { ...form, origin: origin() }, body: 'ids=x' });
    assert.match(noToken.body, /form token/);
    const viaReferer = await call(server.url, { method: 'POST', path: '/replay', headers: { ...form, referer: `${origin()}/replay/preview` }, body: 'ids=x&token=wrong' });
    assert.match(viaReferer.body, /form token/, 'the referer passes the origin check; the token still decides');
  });

  it('a non-form POST is a 400, other methods a 405, unknown pages and rows a 404', async () => {
    const json = await call(server.url, { method: 'POST', path: '/replay', headers: { 'content-type': 'application/json', origin: origin() }, body: '{}' });
    assert.equal(json.status, 400);
    assert.equal((await call(server.url, { method: 'DELETE' })).status, 405);
    assert.equal((await call(server.url, { path: '/nope' })).status, 404);
    assert.equal((await call(server.url, { path: "/row/outbox/1'%20OR%201=1" })).status, 404);
    assert.equal((await call(server.url, { path: '/dead?table=users' })).status, 400);
  });
});

describe('console row page: trace context', () => {
  let server: ConsoleServer;
  let db: TestDatabase;
  withConsoleServer({}, (d, s) => {
    db = d;
    server = s;
  });

  const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  /** Inserts one row with `trace` as its stored `trace_context` (a jsonb literal or null); returns its page. */
  async function rowWith(table: 'outbox' | 'inbox', trace: string | null) {
    const t = `"${db.schema}"."${db.config.tables[table]}"`;
    const [row] =
      table === 'outbox'
        ? await db.query<{ id: string }>(`INSERT INTO ${t} (topic, key, payload, state, trace_context) VALUES ('orders.paid', 'o-1', '{}', 'dead', $1::jsonb) RETURNING id`, [trace])
        : await db.query<{ id: string }>(
            `INSERT INTO ${t} (source, idempotency_key, aggregate_id, payload, state, trace_context) VALUES ('payments', gen_random_uuid()::text, 'a-1', '{}', 'dead', $1::jsonb) RETURNING id`,
            [trace],
          );
    const res = await call(server.url, { path: `/row/${table}/${row!.id}` });
    assert.equal(res.status, 200);
    return res.body;
  }
  /** The page's trace section (between its heading and the payload's). */
  const section = (body: string) => body.slice(body.indexOf('<h2>Trace</h2>'), body.indexOf('<h2>Payload</h2>'));

  it('a row written with a W3C trace context shows its trace id, parent span id, sampled flag and X-Ray trace id; tracestate by vendor only', async () => {
    const body = section(await rowWith('outbox', JSON.stringify({ traceparent: TRACEPARENT, tracestate: 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7' })));
    assert.match(body, /data-trace="valid"/);
    assert.match(body, /<code data-trace-id>4bf92f3577b34da6a3ce929d0e0e4736<\/code>/);
    assert.match(body, /<code data-parent-span-id>00f067aa0ba902b7<\/code>/);
    assert.match(body, /<code data-xray-trace-id>1-4bf92f35-77b34da6a3ce929d0e0e4736<\/code>/, 'the first 8 hex digits, then the other 24');
    assert.match(body, /<dd data-sampled>yes<\/dd>/);
    assert.match(body, /vendors: congo, rojo/);
    assert.ok(!body.includes('t61rcWkgMzE'), 'tracestate values are not shown');
  });

  it('of a tracestate key shows the system of a multi-tenant key and at most 32 characters of a simple one', async () => {
    const long = `a${'-db-password-hunter2'.repeat(10)}`;
    const body = section(await rowWith('inbox', JSON.stringify({ traceparent: TRACEPARENT, tracestate: `7c7a38d4-a8e4e3c6@dt=fw4;0,${long}=1,rojo=00f067aa0ba902b7` })));
    assert.match(body, new RegExp(`vendors: dt, ${long.slice(0, 32)}…, rojo`));
    assert.ok(!body.includes('7c7a38d4'), 'the tenant id of a multi-tenant key is not shown');
    assert.ok(!body.includes(long.slice(0, 33)), 'a long key is cut at 32 characters');
  });

  it('an inbox row with only an X-Ray header (a Root, no Parent) shows the trace id from it and no parent span', async () => {
    const body = section(await rowWith('inbox', JSON.stringify({ awsTraceHeader: 'Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=0;Lineage=a87bd80c:0' })));
    assert.match(body, /<code data-trace-id>5759e988bd862e3fe1be46a994272793<\/code>/);
    assert.match(body, /<code data-xray-trace-id>1-5759e988-bd862e3fe1be46a994272793<\/code>/);
    assert.match(body, /parent span id<\/dt><dd><span class="muted">not recorded/);
    assert.match(body, /<dd data-sampled>no<\/dd>/);
    assert.ok(!body.includes('a87bd80c'), 'other X-Ray header fields are not shown');
  });

  it('a row without a trace context shows none', async () => {
    assert.match(section(await rowWith('outbox', null)), /<p class="muted" data-trace="none">none<\/p>/);
    assert.match(section(await rowWith('inbox', null)), /data-trace="none"/);
  });

  it('a malformed trace context shows the invalid marker and none of its content, escaped or not', async () => {
    for (const stored of [
      JSON.stringify({ traceparent: '<script>window.__xss = 3</script>', awsTraceHeader: 'Root=<img src=x onerror="window.__xss=4">' }),
      JSON.stringify('<b>not an object</b>'),
      JSON.stringify({ traceparent: TRACEPARENT.toUpperCase() }),
      '{}',
    ]) {
      const page = await rowWith('outbox', stored);
      assert.match(section(page), /data-trace="invalid">invalid trace context/, stored);
      for (const raw of ['__xss', 'not an object', 'onerror', '4BF92F']) assert.ok(!page.includes(raw), `${stored}: ${raw} is not on the page`);
    }
  });

  it('a valid traceparent with a hostile tracestate shows the trace and names the left-out member only', async () => {
    const page = await rowWith('inbox', JSON.stringify({ traceparent: TRACEPARENT, tracestate: 'x=<img src=x onerror="window.__xss=5">' }));
    assert.match(section(page), /<code data-trace-id>4bf92f3577b34da6a3ce929d0e0e4736<\/code>/);
    assert.match(section(page), /data-trace-left-out>Left out, as not valid: the stored tracestate\./);
    assert.ok(!page.includes('onerror') && !page.includes('__xss'));
  });
});

describe('queuebox console start-up', () => {
  let db: TestDatabase;
  let dir: string;
  before(async () => {
    db = await createTestDatabase();
    dir = mkdtempSync(join(tmpdir(), 'queuebox-console-test-'));
  });
  after(async () => {
    rmSync(dir, { recursive: true, force: true });
    await db?.drop();
  });

  async function serve(options: { env: Record<string, string>; host?: string; localRunFile?: string; requireToken?: boolean }) {
    const stop = new AbortController();
    let stderr = '';
    let stdout = '';
    let body = '';
    await runConsole({
      ...options,
      port: 0,
      stdout: (t) => (stdout += t),
      stderr: (t) => (stderr += t),
      signal: stop.signal,
      onListening: (server) => {
        void call(server.url.replace('0.0.0.0', '127.0.0.1'), { headers: { host: `127.0.0.1:${new URL(server.url).port}` } }).then((res) => {
          body = res.body;
          stop.abort();
        });
      },
    });
    return { stdout, stderr, body };
  }

  it('serves the configured database on 127.0.0.1, read-only, without a warning', async () => {
    const run = await serve({ env: { QUEUEBOX_DATABASE_URL: db.url, QUEUEBOX_DATABASE__SCHEMA: db.schema } });
    assert.match(run.stdout, /^QueueBox console on http:\/\/127\.0\.0\.1:\d+\/ \(read-only/);
    assert.equal(run.stderr, '');
    assert.match(run.body, /read-only/);
  });

  it('another bind address is refused without --require-token', async () => {
    await assert.rejects(
      runConsole({ env: { QUEUEBOX_DATABASE_URL: db.url, QUEUEBOX_DATABASE__SCHEMA: db.schema }, host: '0.0.0.0', port: 0, stdout: () => {}, stderr: () => {} }),
      (error: unknown) => error instanceof UsageError && /--host 0\.0\.0\.0 makes the console reachable from the network; add --require-token/.test(error.message),
    );
  });

  it('with --require-token another bind address prints a warning and the access address; a client without the token reads nothing', async () => {
    const run = await serve({ env: { QUEUEBOX_DATABASE_URL: db.url, QUEUEBOX_DATABASE__SCHEMA: db.schema }, host: '0.0.0.0', requireToken: true });
    assert.match(run.stderr, /^WARNING: the console listens on 0\.0\.0\.0: anyone who can reach this address and has its access token/);
    assert.match(run.stdout, /\nopen http:\/\/0\.0\.0\.0:\d+\/\?access=[A-Za-z0-9_-]{32}/);
    assert.match(run.body, /needs its access token/);
    assert.doesNotMatch(run.body, /Overview/);
  });

  it('with --require-token on 127.0.0.1 a note says the cookie reaches every local service and names an address of its own; on that address no network warning', async () => {
    const env = { QUEUEBOX_DATABASE_URL: db.url, QUEUEBOX_DATABASE__SCHEMA: db.schema };
    const shared = await serve({ env, requireToken: true });
    assert.match(shared.stdout, /\nopen http:\/\/127\.0\.0\.1:\d+\/\?access=[A-Za-z0-9_-]{32} \(a browser presents the token once and then holds a session for 12 hours/);
    assert.match(shared.stderr, /^note: browsers send the console's session cookie to every server on 127\.0\.0\.1, whatever its port; .* --host 127\.\d{1,3}\.\d{1,3}\.\d{1,3} \(any 127\.x\.y\.z\)\n$/);
    const own = await serve({ env, host: '127.61.7.9', requireToken: true });
    assert.equal(own.stderr, '', 'a 127.x.y.z address is loopback: no warning, no note');
    assert.match(own.stdout, /\nopen http:\/\/127\.61\.7\.9:\d+\/\?access=/);
    assert.match(own.body, /needs its access token/);
  });

  it('a port already in use is a UsageError naming the address', async () => {
    const env = { QUEUEBOX_DATABASE_URL: db.url, QUEUEBOX_DATABASE__SCHEMA: db.schema };
    const stop = new AbortController();
    let second: Promise<void> | undefined;
    await runConsole({
      env, port: 0, stdout: () => {}, stderr: () => {}, signal: stop.signal,
      onListening: (server) => {
        const port = Number(new URL(server.url).port);
        second = assert.rejects(runConsole({ env, port, stdout: () => {}, stderr: () => {} }), (error: unknown) => error instanceof UsageError && error.message.includes(`127.0.0.1:${port} (EADDRINUSE)`));
        void second.finally(() => stop.abort());
      },
    });
    await second;
  });

  it('with no database and no local run it stops with a ConfigError that says what to do', async () => {
    await assert.rejects(
      runConsole({ env: {}, port: 0, stdout: () => {}, stderr: () => {}, localRunFile: join(dir, 'absent.json') }),
      (error: unknown) => error instanceof ConfigError && /npm start/.test(error.message),
    );
  });
});
