/**
 * The console under hostile or broken input: malformed paths, dates and filters are a 400 naming
 * the field (never a 500), paging through dead rows leaves none out, a huge payload is cut and
 * redacted in one pass, secrets nested under a secret-named key stay masked, a replay confirm acts
 * only on its own preview and only once, and start-up refuses a bad port or database in one line.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, describe, it } from 'node:test';
import type { ConsoleServer } from '../../lib/console/console-server.ts';
import { createRedactor } from '../../lib/console/redact-row.ts';
import { runConsole } from '../../lib/console/run-console.ts';
import { QueueBoxError, UsageError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { DEAD_PAGE } from '../../lib/console/dead-page.ts';
import { withConsoleServer, consoleCall as call } from './console-fixture.ts';

describe('console: malformed input is a 400 naming the field', () => {
  let server: ConsoleServer;
  const errors: unknown[] = [];
  withConsoleServer({ allowActions: true, onError: (e) => errors.push(e) }, (_db, s) => {
    server = s;
  });

  const cases: Array<[string, RegExp]> = [
    ['/row/outbox/%', /percent-encoding/],
    ['/row/inbox/%E0%A4%A', /percent-encoding/],
    ['/dead?from=-271821-04-20T00:00:00Z', /from must be an ISO-8601 time with its zone/],
    ['/dead?to=1', /to must be an ISO-8601 time with its zone/],
    ['/dead?from=2026-11-30T12:00:00', /from has no time zone: write it in UTC with a Z \(e\.g\. 2026-11-30T12:00:00Z\)/],
    ['/dead?to=2026-11-30%2012:00', /to has no time zone/],
    ['/replay/preview?createdFrom=2026-11-30T12:00', /createdFrom has no time zone/],
    ['/dead?to=2026-02-30', /to is not a valid time \(2026-02 has no day 30\)/],
    ['/replay/preview?createdTo=2026-04-31T00:00:00Z', /createdTo is not a valid time \(2026-04 has no day 31\)/],
    ['/dead?label=a%00b', /label must not contain a NUL/],
    ['/dead?table=inbox&label=%00', /label must not contain a NUL/],
    ['/replay/preview?topics=orders%00', /topics\.0 must not contain a NUL/],
    // Year 0000 and offsets past either end: PostgreSQL has no year 0, SQL Server's datetime2 ends with 9999.
    ['/dead?before=0000-01-01T00:00:00Z~00000000-0000-4000-8000-000000000001', /before must be the position an &quot;Older dead rows&quot; link carries/],
    ['/dead?from=0000-01-01T00:00:00Z', /from is out of range: times run from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z/],
    ['/dead?to=0001-01-01T00:30:00%2B01:00', /to is out of range/],
    ['/dead?table=inbox&to=9999-12-31T23:00:00-02:00', /to is out of range/],
    ['/replay/preview?createdFrom=0000-06-01', /createdFrom is out of range/],
    ['/replay/preview?table=inbox&sources=s&createdTo=0000-12-31T23:00:00Z', /createdTo is out of range/],
  ];
  for (const [path, message] of cases) {
    it(`GET ${path}`, async () => {
      const res = await call(server.url, { path });
      assert.equal(res.status, 400, res.body.slice(0, 300));
      assert.match(res.body, message);
      assert.doesNotMatch(res.body, /\n\s+at /, 'no stack trace');
    });
  }

  it('the first and last times both databases store are taken', async () => {
    for (const path of ['/dead?from=0001-01-01T00:00:00Z&to=9999-12-31T23:59:59.999Z', '/dead?table=inbox&from=0001-01-01', `/dead?before=${encodeURIComponent('0001-01-01T00:00:00Z~00000000-0000-4000-8000-000000000001')}`, '/replay/preview?createdFrom=0001-01-01T00:00:00Z&createdTo=9999-12-31T23:59:59Z']) {
      const res = await call(server.url, { path });
      assert.equal(res.status, 200, `${path}: ${res.body.slice(0, 300)}`);
    }
  });

  it('a form larger than 64 KB is a 400 the client reads, not a reset — with or without a Content-Length', async () => {
    for (const [size, chunked] of [[100 * 1024, false], [100 * 1024, true], [900 * 1024, false], [900 * 1024, true]] as const) {
      const body = `ids=${'x'.repeat(size)}`;
      const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const target = new URL(server.url);
        const req = request(
          { host: target.hostname, port: target.port, path: '/replay', method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: server.url, ...(chunked ? {} : { 'content-length': String(body.length) }) } },
          (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (chunk: string) => (text += chunk));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
          },
        );
        req.on('error', reject);
        // Chunked: the body arrives in pieces, and the console finds it too large as it reads.
        if (chunked) for (let at = 0; at < body.length; at += 8192) req.write(body.slice(at, at + 8192));
        req.end(chunked ? undefined : body);
      });
      assert.equal(answer.status, 400, `${size} bytes, chunked: ${chunked}`);
      assert.match(answer.body, /form larger than 65536 bytes/);
    }
  });

  it('none of them reached the 500 handler', () => {
    assert.deepEqual(errors, []);
  });
});

describe('console: another site cannot make the browser read the console in the background', () => {
  let server: ConsoleServer;
  withConsoleServer({ allowActions: true }, (_db, s) => {
    server = s;
  });

  it('an <img> or no-cors fetch from another site is a 403; a followed link gets a page naming it; the console itself and curl are served', async () => {
    const path = '/replay/preview?topics=orders.failed';
    const img = await call(server.url, { path, headers: { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'no-cors', 'sec-fetch-dest': 'image' } });
    assert.equal(img.status, 403);
    assert.match(img.body, /another site/);
    const frame = await call(server.url, { path: '/', headers: { 'sec-fetch-site': 'same-site', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'iframe' } });
    assert.equal(frame.status, 403);
    const link = await call(server.url, { path, headers: { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' } });
    assert.equal(link.status, 200);
    assert.match(link.body, /data-foreign-link/, 'a followed link gets the page naming it, not the count');
    assert.doesNotMatch(link.body, /data-preview-count/);
    const own = await call(server.url, { path: '/overview/live', headers: { 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty' } });
    assert.equal(own.status, 200);
    assert.equal((await call(server.url, { path })).status, 200);
  });
});

describe('console: paging through dead rows leaves none out', () => {
  let db: TestDatabase;
  let server: ConsoleServer;
  withConsoleServer({}, (d, s) => {
    db = d;
    server = s;
  });

  /** Follows "Older dead rows" from `start`; returns every row id shown, in order. */
  async function pageThrough(start: string): Promise<string[]> {
    const shown: string[] = [];
    let path = start;
    for (let pages = 0; path !== '' && pages < 20; pages++) {
      const res = await call(server.url, { path });
      assert.equal(res.status, 200);
      for (const m of res.body.matchAll(/data-dead-row="([^"]+)"/g)) shown.push(m[1]!);
      path = (/<a href="(\/dead\?[^"]+)">Older dead rows/.exec(res.body)?.[1] ?? '').replaceAll('&amp;', '&');
    }
    return shown;
  }

  it('rows that died within one millisecond (a batch) span several pages, each shown once', async () => {
    // 60 rows in one millisecond (three distinct microseconds), 10 rows in each of 4 earlier milliseconds.
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state, updated_at)
      SELECT 'batch.a', '{}', 'dead', '2026-11-30T10:00:00.123456Z'::timestamptz + (n % 3) * interval '1 microsecond' FROM generate_series(1, 60) n`);
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state, updated_at)
      SELECT 'batch.a', '{}', 'dead', '2026-11-30T09:00:00.000700Z'::timestamptz - (n % 4) * interval '1 millisecond' FROM generate_series(1, 40) n`);
    const ids = (await db.query<{ id: string }>(`SELECT id FROM "${db.schema}".outbox WHERE topic = 'batch.a'`)).map((r) => r.id);
    const shown = await pageThrough('/dead?label=batch.a');
    assert.equal(shown.length, 100, 'each row shown once');
    assert.deepEqual([...new Set(shown)].sort(), ids.sort());
  });

  it('inbox rows received in one statement (one created_at) span several pages, each shown once', async () => {
    await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, payload, state, attempt)
      SELECT 'batch.src', 'evt-' || n, '{}', 'dead', 3 FROM generate_series(1, 55) n`);
    const shown = await pageThrough('/dead?table=inbox&label=batch.src');
    assert.equal(shown.length, 55);
    assert.equal(new Set(shown).size, 55);
  });

  it('a row of a time shared by more rows than one scan reads is not skipped (the scan is in cursor order)', { timeout: 60_000 }, async () => {
    // One INSERT: one created_at for all; the needle rows are scattered among the other source's.
    await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, payload, state, attempt)
      SELECT CASE WHEN n % 170 = 0 THEN 'needle.src' ELSE 'hay.src' END, 'tie-' || n, '{}', 'dead', 3 FROM generate_series(1, ${DEAD_PAGE.scanLimit + 200}) n`);
    const shown = await pageThrough('/dead?table=inbox&label=needle.src');
    const needles = (await db.query<{ id: string }>(`SELECT id FROM "${db.schema}".inbox WHERE source = 'needle.src'`)).map((r) => r.id);
    assert.deepEqual([...new Set(shown)].sort(), needles.sort());
  });

  it('a page position that is not one an "Older dead rows" link carries is a 400 naming it', async () => {
    for (const before of ['975', '2026-11-30T10:00:00Z~not-a-uuid', '2026-13-45T10:00:00Z~3f1c2a9e-1b2c-4d5e-8f90-123456789abc', '2026-02-30T10:00:00Z~3f1c2a9e-1b2c-4d5e-8f90-123456789abc']) {
      const res = await call(server.url, { path: `/dead?before=${encodeURIComponent(before)}` });
      assert.equal(res.status, 400, before);
      assert.match(res.body, /before must be the position an &quot;Older dead rows&quot; link carries/);
    }
  });
});

describe('console: bidirectional formatting characters in a row are shown, not obeyed', () => {
  let db: TestDatabase;
  let server: ConsoleServer;
  withConsoleServer({}, (d, s) => {
    db = d;
    server = s;
  });
  const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

  it('a U+202E in a topic, key, error or payload is written as a visible \\u202e on every page that shows it, as the CLI writes it', async () => {
    const [row] = await db.query<{ id: string }>(
      `INSERT INTO "${db.schema}".outbox (topic, key, payload, state, attempt, last_error) VALUES ($1, $2, $3, 'dead', 4, $4) RETURNING id`,
      ['orders.paid\u202E', 'k\u2067ey\u200F', { note: '\u202Dfdp.exe', hebrew: 'שלום' }, 'HTTP 500 \u202Elive'],
    );
    for (const path of ['/dead', `/row/outbox/${row!.id}`, `/replay/preview?ids=${row!.id}`]) {
      const res = await call(server.url, { path });
      assert.equal(res.status, 200, path);
      assert.doesNotMatch(res.body, BIDI, `${path}: no bidirectional formatting character reaches the page`);
      assert.ok(res.body.includes('orders.paid\\u202e'), `${path}: the topic shows where its override is`);
      assert.ok(res.body.includes('k\\u2067ey\\u200f'), `${path}: so does the key`);
    }
    const page = (await call(server.url, { path: '/dead' })).body;
    assert.ok(page.includes('HTTP 500 \\u202elive') && page.includes('\\u202dfdp.exe'), 'errors and payloads too');
    assert.ok(page.includes('שלום'), 'right-to-left text itself is kept');
  });
});

describe('console: a huge payload does not make a huge page', () => {
  let db: TestDatabase;
  let server: ConsoleServer;
  withConsoleServer({}, (d, s) => {
    db = d;
    server = s;
  });

  it('the dead rows page shows 16 KB of a 1 MB payload, the row page 512 KB, each saying how much was cut', async () => {
    const [row] = await db.query<{ id: string }>(
      `INSERT INTO "${db.schema}".outbox (topic, payload, state) VALUES ('too.large', jsonb_build_object('blob', repeat('x', 1048576)), 'dead') RETURNING id`,
    );
    const list = await call(server.url, { path: '/dead?label=too.large' });
    assert.equal(list.status, 200);
    assert.ok(list.body.length < 64 * 1024, `dead rows page is ${list.body.length} characters`);
    assert.match(list.body, /… cut here: 1,0\d\d,\d\d\d more characters \(1,048,5\d\d in all\)/);
    const one = await call(server.url, { path: `/row/outbox/${row!.id}` });
    assert.equal(one.status, 200);
    assert.ok(one.body.length < 600 * 1024, `row page is ${one.body.length} characters`);
    assert.match(one.body, /… cut here: 5\d\d,\d\d\d more characters/);
  });
});

describe('console: redaction of secret-named keys', () => {
  // The timeout only turns a hang into a failure: before, the URL rule read a long run of letters
  // once per character (a 1 MB payload string blocked the console for minutes).
  it('redacts a megabyte-long string in one pass, and still masks URL passwords after any prefix', { timeout: 60_000 }, () => {
    const r = createRedactor([]);
    assert.equal((r.value({ blob: 'x'.repeat(1_048_576) }) as { blob: string }).blob.length, 1_048_576);
    assert.equal(r.text('ab1'.repeat(300_000)).length, 900_000);
    assert.equal(r.text('connect 1postgres://app:hunter2@db/x; x.y+z://a:b@c'), 'connect 1postgres://***@db/x; x.y+z://***@c');
  });

  it('masks a whole list or object under a secret-named key', () => {
    const r = createRedactor([]);
    assert.deepEqual(r.value({ apiKeys: ['k-one', 'k-two'], credentials: { user: 'app', hint: 'open sesame' }, secret: null, ok: ['a'] }), {
      apiKeys: '***', credentials: '***', secret: null, ok: ['a'],
    });
  });
});

describe('console: a replay confirm acts on its own preview, once', () => {
  let db: TestDatabase;
  let server: ConsoleServer;
  withConsoleServer({ allowActions: true }, (d, s) => {
    db = d;
    server = s;
  });

  const dead = async (n: number, topic: string) =>
    (await db.query<{ id: string }>(`INSERT INTO "${db.schema}".outbox (topic, payload, state) SELECT $1, '{}', 'dead' FROM generate_series(1, $2) RETURNING id`, [topic, n])).map((r) => r.id);
  const states = async (ids: string[]) =>
    (await db.query<{ id: string; state: string }>(`SELECT id, state FROM "${db.schema}".outbox WHERE id = ANY($1::uuid[]) ORDER BY id`, [ids])).map((r) => r.state);

  /** The browser's session cookie (set by the first page it loads). */
  let cookie = '';

  /** Loads the preview page and returns the confirm form's fields as a browser would post them. */
  async function preview(query: string): Promise<URLSearchParams> {
    const res = await call(server.url, { path: `/replay/preview?${query}`, headers: cookie ? { cookie } : {} });
    assert.equal(res.status, 200);
    cookie ||= res.cookie;
    const form = /<form method="post" action="\/replay">([\s\S]*?)<\/form>/.exec(res.body)?.[1] ?? '';
    const fields = new URLSearchParams();
    for (const m of form.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) fields.append(m[1]!, m[2]!);
    assert.ok(fields.get('token'), 'the confirm form carries the token');
    return fields;
  }
  const confirm = (fields: URLSearchParams) =>
    call(server.url, { method: 'POST', path: '/replay', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: server.url, cookie }, body: fields.toString() });

  it('a dead group\'s link replays that topic only, when the topic holds spaces or commas and its pieces are topics too', async () => {
    const [group] = await dead(1, 'billing refund, eu');
    const pieces = [...(await dead(1, 'billing')), ...(await dead(1, 'refund')), ...(await dead(1, 'eu'))];
    const page = await call(server.url, { path: '/dead', headers: cookie ? { cookie } : {} });
    cookie ||= page.cookie;
    const link = [...page.body.matchAll(/href="(\/replay\/preview\?[^"]+)"/g)].map((m) => m[1]!.replaceAll('&amp;', '&')).find((href) => new URLSearchParams(href.split('?')[1]).getAll('topic').includes('billing refund, eu'));
    assert.ok(link, 'the group of the topic has a replay link naming it exactly');
    const fields = await preview(link.split('?')[1]!);
    assert.deepEqual(fields.getAll('ids'), [group], 'the preview lists the group\'s row only');
    const res = await confirm(fields);
    assert.match(res.body, /data-moved="1"/);
    assert.deepEqual(await states([group!]), ['pending']);
    assert.deepEqual(await states(pieces), ['dead', 'dead', 'dead']);
  });

  it('topics typed into the replay form are one per line: a topic may hold spaces and commas, taken whole', async () => {
    const [spaced] = await dead(1, 'orders shipped');
    const [comma] = await dead(1, 'order.paid,v2');
    const pieces = [...(await dead(1, 'order.paid')), ...(await dead(1, 'v2'))];
    const fields = await preview(new URLSearchParams({ topics: 'orders shipped\r\norder.paid,v2\nother.topic' }).toString());
    assert.deepEqual(fields.getAll('ids').sort(), [spaced, comma].sort());
    assert.ok(pieces.every((id) => !fields.getAll('ids').includes(id!)), 'the pieces of a topic with a comma are not replayed');
  });

  it('a second post of the same confirm (resubmitted form) is refused and moves nothing', async () => {
    const ids = await dead(2, 'twice.failed');
    const fields = await preview('topics=twice.failed');
    const first = await confirm(fields);
    assert.equal(first.status, 200);
    assert.match(first.body, /data-moved="2"/);
    // The rows were delivered and died again: a resubmitted confirm must not replay them a second time.
    await db.query(`UPDATE "${db.schema}".outbox SET state = 'dead' WHERE id = ANY($1::uuid[])`, [ids]);
    const second = await confirm(fields);
    assert.equal(second.status, 409);
    assert.match(second.body, /already confirmed, has expired, or was made in another browser session .*; nothing moved/);
    assert.deepEqual(await states(ids), ['dead', 'dead']);
  });

  it('a previewed row replayed elsewhere and dead again before the confirm is not replayed a second time', async () => {
    const [kept, touched] = await dead(2, 'changed.failed');
    const fields = await preview('topics=changed.failed');
    // Meanwhile `queuebox replay` moved it, it failed again and died again: same state, new updated_at.
    await db.query(`UPDATE "${db.schema}".outbox SET updated_at = clock_timestamp() + interval '1 second', replay_count = replay_count + 1 WHERE id = $1`, [touched]);
    const res = await confirm(fields);
    assert.equal(res.status, 200);
    assert.match(res.body, /data-moved="1"/);
    assert.match(res.body, /1 row had left dead or changed since the preview/);
    const after = await db.query<{ id: string; state: string }>(`SELECT id, state FROM "${db.schema}".outbox WHERE id = ANY($1::uuid[])`, [[kept, touched]]);
    assert.deepEqual(Object.fromEntries(after.map((r) => [r.id, r.state])), { [kept!]: 'pending', [touched!]: 'dead' });
  });

  it('a confirm naming a row its preview did not list is refused and moves nothing', async () => {
    const [listed] = await dead(1, 'listed.failed');
    const [other] = await dead(1, 'other.failed');
    const fields = await preview('topics=listed.failed');
    fields.append('ids', other!);
    const res = await confirm(fields);
    assert.equal(res.status, 400);
    assert.match(res.body, /rows its preview did not list/);
    assert.deepEqual(await states([listed!, other!]), ['dead', 'dead']);
  });

  it('a confirm widening the states of its preview is refused and moves nothing', async () => {
    const [row] = await dead(1, 'states.failed');
    const fields = await preview('topics=states.failed');
    fields.append('states', 'sent');
    const res = await confirm(fields);
    assert.equal(res.status, 400);
    assert.match(res.body, /other states than its preview/);
    assert.deepEqual(await states([row!]), ['dead']);
  });

  it('a confirm without its preview (token and ids only) is refused and moves nothing', async () => {
    const [row] = await dead(1, 'bare.failed');
    const fields = await preview('topics=bare.failed');
    fields.delete('confirm');
    const res = await confirm(fields);
    assert.equal(res.status, 400);
    assert.match(res.body, /names its preview; preview first/);
    assert.deepEqual(await states([row!]), ['dead']);
  });
});

describe('console start-up refusals', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => {
    await db?.drop();
  });

  it('a port outside 0..65535 is a UsageError naming the flag', async () => {
    const env = { QUEUEBOX_DATABASE_URL: db.url, QUEUEBOX_DATABASE__SCHEMA: db.schema };
    await assert.rejects(runConsole({ env, port: 99_999, stdout: () => {}, stderr: () => {} }), (error: unknown) => error instanceof UsageError && /--port must be a TCP port/.test(error.message));
  });

  it('a database that does not exist is one line naming the cause, not a stack', async () => {
    const url = new URL(db.url);
    url.pathname = '/queuebox_no_such_database';
    await assert.rejects(runConsole({ env: { QUEUEBOX_DATABASE_URL: url.toString() }, port: 0, stdout: () => {}, stderr: () => {} }), (error: unknown) => {
      assert.ok(error instanceof QueueBoxError, String(error));
      assert.match(error.message, /^console: cannot use the database \(3D000\): database "queuebox_no_such_database" does not exist/);
      assert.doesNotMatch(error.message, /\n/);
      return true;
    });
  });
});
