/**
 * The console's sessions: a form token works only with the session cookie of the browser it was
 * served to, and with an access token (required off loopback) nothing is served — no page, no
 * asset, no replay — to a client that has not presented it. A session ends 12 hours after it was
 * issued, and a console may listen on a loopback address of its own (a host name whose cookies no
 * other local service receives).
 */
import assert from 'node:assert/strict';
import { request, type IncomingMessage } from 'node:http';
import { describe, it } from 'node:test';
import { isLoopback, startConsoleServer, type ConsoleServer } from '../../lib/console/console-server.ts';
import { ConsoleSessions, SESSION_MAX_AGE_SECONDS } from '../../lib/console/console-sessions.ts';
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
    assert.match(alice.cookie, /^queuebox_console_\d+=[0-9a-f]{32}\.\d+\.[0-9a-f]{64}$/);
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

describe('console sessions: a session ends 12 hours after it was issued', () => {
  const asRequest = (cookie: string) => ({ headers: { cookie } }) as IncomingMessage;

  it('the cookie says Max-Age=43200 and the console refuses it from the 12th hour on, whatever the browser sends', () => {
    let now = Date.parse('2026-11-30T08:00:00Z');
    const sessions = new ConsoleSessions(8787, undefined, () => now);
    const issued = sessions.issue();
    assert.match(issued.setCookie, /; Max-Age=43200;/);
    assert.equal(SESSION_MAX_AGE_SECONDS, 12 * 60 * 60);
    const cookie = issued.setCookie.split(';')[0]!;
    now += SESSION_MAX_AGE_SECONDS * 1000 - 1;
    assert.equal(sessions.sessionOf(asRequest(cookie)), issued.id, 'still a session just before the end');
    assert.ok(sessions.checkFormToken(sessions.sessionOf(asRequest(cookie)), sessions.formToken(issued.id)));
    now += 1;
    assert.equal(sessions.sessionOf(asRequest(cookie)), undefined, 'no session once 12 hours have passed');
    assert.equal(sessions.checkFormToken(sessions.sessionOf(asRequest(cookie)), sessions.formToken(issued.id)), false, 'its form token acts no more');
    const renewed = cookie.replace(/\.\d+\./, `.${now}.`);
    assert.equal(sessions.sessionOf(asRequest(renewed)), undefined, 'the issue time is signed: a cookie cannot be made younger');
  });

  it('an access-token console sets the cookie with its lifetime; after it the browser needs the access address again', async () => {
    const db = { driver: { dialect: 'postgres' } as never, config: {} as never };
    const server = await startConsoleServer({ ...db, port: 0, accessToken: 'a-long-random-access-token-0123456789' });
    try {
      const opened = await new Promise<string[]>((resolve, reject) => {
        const target = new URL(server.url);
        request({ host: target.hostname, port: target.port, path: '/?access=a-long-random-access-token-0123456789' }, (res) => {
          res.resume();
          resolve(res.headers['set-cookie'] ?? []);
        })
          .on('error', reject)
          .end();
      });
      assert.equal(opened.length, 1);
      assert.match(opened[0]!, /^queuebox_console_\d+=[0-9a-f]{32}\.\d+\.[0-9a-f]{64}; Path=\/; Max-Age=43200; HttpOnly; SameSite=Strict$/);
    } finally {
      await server.close();
    }
  });
});

describe('console on a loopback address of its own (127.x.y.z)', () => {
  it('every 127.0.0.0/8 address is loopback: no access token is required there, and nothing else is', () => {
    for (const host of ['127.0.0.1', '127.61.7.9', '127.255.255.254', 'localhost', '::1']) assert.equal(isLoopback(host), true, host);
    for (const host of ['0.0.0.0', '::', '128.0.0.1', '127.256.0.1', '127.1.1', '10.0.0.127', '127.0.0.1.example.com']) assert.equal(isLoopback(host), false, host);
  });

  let server: ConsoleServer;
  const accessToken = 'a-long-random-access-token-0123456789';
  withConsoleServer({ host: '127.61.7.9', accessToken }, (_d, s) => {
    server = s;
  });

  it('serves under its own address: the access address there sets the cookie, which opens the pages there', async () => {
    assert.match(server.url, /^http:\/\/127\.61\.7\.9:\d+$/);
    const opened = await call(server.url, `/?access=${accessToken}`);
    assert.equal(opened.status, 303);
    const page = await call(server.url, '/dead', { headers: { cookie: opened.cookie } });
    assert.equal(page.status, 200);
    assert.match(page.body, /Dead rows/);
    assert.equal((await call(server.url, '/dead', { headers: { host: `127.0.0.2:${new URL(server.url).port}`, cookie: opened.cookie } })).status, 421, 'another host name is refused');
  });
});
