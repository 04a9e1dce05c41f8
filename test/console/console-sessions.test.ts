/**
 * The console's sessions: a form token works only with the session cookie of the browser it was
 * served to, and with an access token (required off loopback) nothing is served — no page, no
 * asset, no replay — to a client that has not presented it.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { describe, it } from 'node:test';
import { startConsoleServer, type ConsoleServer } from '../../lib/console/console-server.ts';
import { UsageError } from '../../lib/errors.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { withConsoleServer } from './console-fixture.ts';

interface Answer {
  status: number;
  body: string;
  cookie: string;
  location: string | undefined;
}

function call(url: string, path: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Answer> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ host: target.hostname, port: target.port, path, method: options.method ?? 'GET', headers: options.headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, body, cookie: (res.headers['set-cookie'] ?? []).map((c) => c.split(';')[0]).join('; '), location: res.headers.location }),
      );
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

/** The confirm form of a preview page, as a browser would post it. */
function confirmFields(body: string): URLSearchParams {
  const form = /<form method="post" action="\/replay">([\s\S]*?)<\/form>/.exec(body)?.[1] ?? '';
  const fields = new URLSearchParams();
  for (const m of form.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) fields.append(m[1]!, m[2]!);
  return fields;
}

const post = (server: ConsoleServer, fields: URLSearchParams, cookie?: string) =>
  call(server.url, '/replay', {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: server.url, ...(cookie ? { cookie } : {}) },
    body: fields.toString(),
  });

describe('console sessions: a form token belongs to one browser', () => {
  let db: TestDatabase;
  let server: ConsoleServer;
  withConsoleServer({ allowActions: true }, (d, s) => {
    db = d;
    server = s;
  });

  it('a token read from a page replays nothing from another session or without the cookie; with its own cookie it does', async () => {
    const ids = (await db.query<{ id: string }>(`INSERT INTO "${db.schema}".outbox (topic, payload, state) SELECT 'session.failed', '{}', 'dead' FROM generate_series(1, 2) RETURNING id`)).map((r) => r.id);
    const alice = await call(server.url, '/replay/preview?topics=session.failed');
    assert.match(alice.cookie, /^queuebox_console_\d+=[0-9a-f]{32}\.[0-9a-f]{64}$/);
    const fields = confirmFields(alice.body);
    assert.ok(fields.get('token'));
    const mallory = await call(server.url, '/');
    assert.notEqual(mallory.cookie, alice.cookie);
    assert.equal((await post(server, fields, mallory.cookie)).status, 403, 'another session');
    assert.equal((await post(server, fields)).status, 403, 'no session cookie');
    const forged = alice.cookie.replace(/\.[0-9a-f]{64}$/, `.${'0'.repeat(64)}`);
    assert.equal((await post(server, fields, forged)).status, 403, 'a forged cookie');
    const states = async () => (await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".outbox WHERE id = ANY($1::uuid[])`, [ids])).map((r) => r.state);
    assert.deepEqual(await states(), ['dead', 'dead']);
    const own = await post(server, fields, alice.cookie);
    assert.equal(own.status, 200);
    assert.match(own.body, /data-moved="2"/);
  });
});

describe('console sessions: with an access token', () => {
  let server: ConsoleServer;
  const accessToken = 'a-long-random-access-token-0123456789';
  withConsoleServer({ allowActions: true, accessToken }, (_d, s) => {
    server = s;
  });

  it('serves nothing without the token: pages, assets, forged cookies and posts are 401', async () => {
    for (const path of ['/', '/dead', '/assets/console.css', `/?access=${accessToken.slice(1)}`]) {
      const res = await call(server.url, path);
      assert.equal(res.status, 401, path);
      assert.equal(res.cookie, '', `${path}: no session`);
      assert.doesNotMatch(res.body, /<table|data-dead/);
    }
    const port = new URL(server.url).port;
    assert.equal((await call(server.url, '/', { headers: { cookie: `queuebox_console_${port}=${'1'.repeat(32)}.${'2'.repeat(64)}` } })).status, 401);
    const blind = await call(server.url, '/replay', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: server.url }, body: 'ids=x&token=y' });
    assert.equal(blind.status, 401);
  });

  it('the access address sets a session cookie and redirects to the same page without the token; the cookie then opens every page', async () => {
    const opened = await call(server.url, `/dead?table=inbox&access=${accessToken}`);
    assert.equal(opened.status, 303);
    assert.equal(opened.location, '/dead?table=inbox');
    assert.match(opened.cookie, /^queuebox_console_\d+=/);
    const page = await call(server.url, '/dead?table=inbox', { headers: { cookie: opened.cookie } });
    assert.equal(page.status, 200);
    assert.match(page.body, /Dead rows/);
    const bearer = await call(server.url, '/', { headers: { authorization: `Bearer ${accessToken}` } });
    assert.equal(bearer.status, 200, 'a script may send the token as a bearer token');
  });

  it('a console off loopback does not start without an access token', async () => {
    const db = { driver: undefined as never, config: undefined as never };
    await assert.rejects(startConsoleServer({ ...db, host: '0.0.0.0', port: 0 }), (e: unknown) => e instanceof UsageError && /not loopback\) needs an access token/.test(e.message));
    await assert.rejects(startConsoleServer({ ...db, host: '0.0.0.0', port: 0, accessToken: 'short' }), UsageError);
  });
});
