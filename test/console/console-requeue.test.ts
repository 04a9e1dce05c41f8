/**
 * The console's requeue of dead inbox rows and its dead-row groups, over HTTP against real
 * PostgreSQL: a preview and a one-time confirm of relay (push) and pull rows, the groups' counts
 * and the links that preview a group, a link never carrying a secret the page masks, the rate per
 * second over the last minute, table headings, and the blocked page's links to the head row.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startConsoleServer, type ConsoleServer } from '../../lib/console/console-server.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { consoleCall as call } from './console-fixture.ts';

/** `&amp;` back to `&` in an attribute value read from a page. */
const attr = (value: string) => value.replace(/&amp;/g, '&').replace(/&quot;/g, '"').replace(/&#39;/g, "'");

describe('console: requeue of dead inbox rows, dead-row groups, rates and headings', () => {
  let db: TestDatabase;
  let server: ConsoleServer;
  let cookie = '';
  const inbox = () => `"${db.schema}".inbox`;
  const outbox = () => `"${db.schema}".orders_outbox`;

  before(async () => {
    db = await createTestDatabase({ tables: { outbox: 'orders_outbox' } });
    const config = {
      ...db.config,
      destinations: { orders: { type: 'sqs' as const, queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders', callTimeoutMs: 10_000 } },
      outbox: { ...db.config.outbox, routes: [{ topicPattern: 'order.*', destination: 'orders' }] },
    };
    server = await startConsoleServer({ driver: db.driver, config, port: 0, allowActions: true });
  });
  after(async () => {
    await server?.close();
    await db?.drop();
  });

  const get = async (path: string) => {
    const res = await call(server.url, { path, headers: cookie ? { cookie } : {} });
    cookie ||= res.cookie;
    return res;
  };
  /** Loads a preview page; returns its body and the confirm form's fields as a browser would post them. */
  async function preview(query: string): Promise<{ body: string; fields: URLSearchParams }> {
    const res = await get(`/replay/preview?${query}`);
    assert.equal(res.status, 200, res.body);
    const form = /<form method="post" action="\/replay">([\s\S]*?)<\/form>/.exec(res.body)?.[1] ?? '';
    const fields = new URLSearchParams();
    for (const m of form.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) fields.append(m[1]!, m[2]!);
    return { body: res.body, fields };
  }
  const confirm = (fields: URLSearchParams) =>
    call(server.url, { method: 'POST', path: '/replay', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: server.url, cookie }, body: fields.toString() });
  const deadInbox = async (source: string, consumption: 'push' | 'pull', n: number, error: string, aggregate: string | null = null) =>
    (
      await db.query<{ id: string }>(
        `INSERT INTO ${inbox()} (source, idempotency_key, aggregate_id, payload, consumption, state, attempt, last_error)
         SELECT $1::text, $1::text || '-' || $2::text || '-' || g || '-' || gen_random_uuid(), $5::text, '{}', $2::text, 'dead', 3, $4::text FROM generate_series(1, $3::int) g RETURNING id`,
        [source, consumption, n, error, aggregate],
      )
    ).map((r) => r.id);
  const inboxStates = async (ids: string[]) =>
    (await db.query<{ state: string }>(`SELECT state FROM ${inbox()} WHERE id = ANY($1::uuid[]) ORDER BY id`, [ids])).map((r) => r.state);

  it('previews dead relay and pull rows by source and consumption, and a confirm requeues exactly those rows, once', async () => {
    const relay = await deadInbox('stripe', 'push', 2, 'relay gave up: no route for topic', 'cus-1');
    const pull = await deadInbox('stripe', 'pull', 1, 'handler threw: bad amount');
    const { body, fields } = await preview('table=inbox&sources=stripe&consumption=push');
    assert.match(body, /data-preview-count="2" data-preview-table="inbox"/);
    assert.match(body, /<th>source<\/th><th>consumption<\/th><th>aggregate<\/th>/);
    assert.match(body, /is again the head of its aggregate/);
    assert.equal(fields.get('table'), 'inbox');
    assert.deepEqual(fields.getAll('ids').sort(), [...relay].sort());
    const switched = new URLSearchParams(fields);
    switched.set('table', 'outbox');
    const refused = await confirm(switched);
    assert.equal(refused.status, 400);
    assert.match(refused.body, /another table than its preview; nothing moved/);
    assert.deepEqual(await inboxStates([...relay, ...pull]), ['dead', 'dead', 'dead'], 'a refused confirm moves nothing');

    const again = await preview('table=inbox&sources=stripe&consumption=push');
    const done = await confirm(again.fields);
    assert.equal(done.status, 200);
    assert.match(done.body, /data-moved="2"/);
    assert.match(done.body, /href="\/row\/inbox\//);
    assert.deepEqual((await inboxStates(relay)).sort(), ['pending', 'pending']);
    assert.deepEqual(await inboxStates(pull), ['dead'], 'the pull row was not in the preview');
    const twice = await confirm(again.fields);
    assert.equal(twice.status, 409);

    const pullPreview = await preview(`table=inbox&ids=${pull[0]}`);
    assert.match(pullPreview.body, /<td>stripe<\/td><td>pull<\/td>/);
    assert.equal((await confirm(pullPreview.fields)).status, 200);
    assert.deepEqual(await inboxStates(pull), ['pending']);
  });

  it('a preview with outbox filters on the inbox is a 400 that says why and keeps the table in the form', async () => {
    const res = await get('/replay/preview?table=inbox&topics=order.paid');
    assert.equal(res.status, 400);
    assert.match(res.body, /topics filters outbox rows; inbox rows filter by sources/);
    assert.match(res.body, /<option value="inbox" selected>inbox<\/option>/, 'the form keeps the table');
  });

  it('the dead page groups dead rows by error with counts, destination or consumption, and a link that previews the group', async () => {
    await db.query(`DELETE FROM ${inbox()}`);
    await db.query(
      `INSERT INTO ${outbox()} (topic, payload, state, last_error)
       SELECT 'order.paid', '{}'::jsonb, 'dead', 'HTTP 503 from orders: Service Unavailable' FROM generate_series(1, 4) g
       UNION ALL SELECT 'order.paid', '{}'::jsonb, 'dead', 'HTTP 400 bad payload'
       UNION ALL SELECT 'audit.logged', '{}'::jsonb, 'dead', 'connecting to postgres://app:hunter2secret@db/app failed'`,
    );
    await deadInbox('billing', 'pull', 3, 'handler timed out');
    await deadInbox('billing', 'push', 1, 'handler timed out');
    const page = await get('/dead');
    assert.equal(page.status, 200);
    const groups = /<table data-dead-groups="outbox">([\s\S]*?)<\/table>/.exec(page.body)?.[1] ?? '';
    const rows = [...groups.matchAll(/<tr data-group-count="(\d+)"><td class="num">[^<]*<\/td><td>([^<]*)<\/td><td>(?:<span class="muted">)?([^<]*)(?:<\/span>)?<\/td>/g)].map((m) => [Number(m[1]), m[2], m[3]]);
    assert.deepEqual(rows, [
      [4, 'order.paid', 'orders'],
      [1, 'audit.logged', 'no route'],
      [1, 'order.paid', 'orders'],
    ]);
    assert.ok(!page.body.includes('hunter2secret'), 'the page masks the password, in the text and in the links');
    const links = [...groups.matchAll(/href="([^"]+)" data-group-rows/g)].map((m) => attr(m[1]!));
    assert.equal(links.length, 3);
    const drill = await preview(links[0]!.replace('/replay/preview?', ''));
    assert.match(drill.body, /data-preview-count="4" data-preview-table="outbox"/, 'the group preview lists the group rows');
    assert.match(links[1]!, /lastErrorPrefix=connecting\+to\+postgres%3A%2F%2F(&|$)/, 'a link carries the error start up to its first masked character');

    const inboxPage = await get('/dead?table=inbox');
    const inboxGroups = /<table data-dead-groups="inbox">([\s\S]*?)<\/table>/.exec(inboxPage.body)?.[1] ?? '';
    assert.deepEqual(
      [...inboxGroups.matchAll(/<tr data-group-count="(\d+)"><td class="num">[^<]*<\/td><td>([^<]*)<\/td><td>([^<]*)<\/td>/g)].map((m) => [Number(m[1]), m[2], m[3]]),
      [
        [3, 'billing', 'pull'],
        [1, 'billing', 'push'],
      ],
    );
    const pullGroup = attr(/href="([^"]+)" data-group-rows/.exec(inboxGroups)![1]!);
    const drilled = await preview(pullGroup.replace('/replay/preview?', ''));
    assert.match(drilled.body, /data-preview-count="3" data-preview-table="inbox"/);
    assert.equal((await confirm(drilled.fields)).status, 200);
    assert.equal((await db.query<{ n: string }>(`SELECT count(*) AS n FROM ${inbox()} WHERE consumption = 'pull' AND state = 'pending'`))[0]!.n, '3', 'the group was requeued');
    assert.match(inboxPage.body, /data-replay-row>requeue…<\/a>/, 'every dead inbox row has its own requeue link');
  });

  it('the overview rate per second is the last minute over 60, and headings name a table only when it is not the default', async () => {
    await db.query(`DELETE FROM ${outbox()}`);
    await db.query(`INSERT INTO ${outbox()} (topic, payload, state, updated_at) SELECT 't', '{}', 'sent', clock_timestamp() - interval '10 seconds' FROM generate_series(1, 480)`);
    await db.query(`INSERT INTO ${outbox()} (topic, payload, state, updated_at) SELECT 't', '{}', 'sent', clock_timestamp() - interval '30 minutes' FROM generate_series(1, 3120)`);
    const page = await get('/');
    const sent = /<section class="card" data-table="outbox">[\s\S]*?<tr data-finished="sent">([\s\S]*?)<\/tr>/.exec(page.body)?.[1] ?? '';
    assert.match(sent, /<td class="num">480<\/td>\s*<td class="num" data-rate>8\.00<\/td><td class="num">3,600<\/td>/, '480 in the last minute is 8 per second (the last hour over 3,600 would say 1.00)');
    assert.match(page.body, /<h2>Outbox <span class="muted">table <code>orders_outbox<\/code><\/span><\/h2>/);
    assert.match(page.body, /<h2>Inbox<\/h2>/);
    assert.doesNotMatch(page.body, /outbox \(outbox\)|inbox \(inbox\)/);
  });

  it('the blocked page links a failing head to its row and to the dead rows of its topic', async () => {
    const [head] = (
      await db.query<{ id: string }>(
        `INSERT INTO ${outbox()} (topic, key, payload, state, attempt, last_error) VALUES ('order.paid', 'order-7', '{}', 'pending', 4, 'HTTP 503'), ('order.paid', 'order-7', '{}', 'pending', 0, NULL) RETURNING id`,
      )
    ).map((r) => r.id);
    const page = await get('/blocked');
    const row = new RegExp(`<tr data-key="order-7" data-cause="poison">([\\s\\S]*?)</tr>`).exec(page.body)?.[1] ?? '';
    assert.match(row, new RegExp(`<a href="/row/outbox/${head}" data-head-row>failing head row →</a>`));
    assert.match(row, /<a href="\/dead\?table=outbox&amp;label=order\.paid" data-dead-of-label>dead rows of this topic →<\/a>/);
  });

  it('a confirm moves dead rows whose updated_at is infinity, -infinity or past year 275760 (plain SQL can write them), as previewed', async () => {
    const ids = (
      await db.query<{ id: string }>(
        `INSERT INTO ${outbox()} (topic, payload, state, attempt, last_error, updated_at)
         VALUES ('order.inf', '{}', 'dead', 3, 'boom', 'infinity'), ('order.inf', '{}', 'dead', 3, 'boom', '-infinity'),
                ('order.inf', '{}', 'dead', 3, 'boom', '280000-01-01 00:00:00+00') RETURNING id`,
      )
    ).map((r) => r.id);
    const previewed = await preview('topic=order.inf');
    const done = await confirm(previewed.fields);
    assert.equal(done.status, 200, done.body);
    assert.match(done.body, /data-moved="3"/);
    const states = await db.query<{ state: string }>(`SELECT state FROM ${outbox()} WHERE id = ANY($1::uuid[])`, [ids]);
    assert.deepEqual(states.map((r) => r.state), ['pending', 'pending', 'pending']);
  });

  it('refuses a preview or a confirm with a parameter the form has not, or a single filter given twice, naming it; nothing moves', async () => {
    await db.query(`INSERT INTO ${outbox()} (topic, payload, state, attempt, last_error) VALUES ('order.typo', '{}', 'dead', 3, 'HTTP 503'), ('order.typo', '{}', 'dead', 3, 'HTTP 400')`);
    const typo = await get('/replay/preview?topic=order.typo&lastErrorPrfix=HTTP%20503');
    assert.equal(typo.status, 400);
    assert.match(typo.body, /replay: unknown parameter &quot;lastErrorPrfix&quot;|replay: unknown parameter "lastErrorPrfix"/);
    const twice = await get('/replay/preview?topic=order.typo&createdFrom=2999-01-01T00:00:00Z&createdFrom=2000-01-01T00:00:00Z');
    assert.equal(twice.status, 400);
    assert.match(twice.body, /replay: createdFrom is given more than once/);
    const narrowed = await preview('topic=order.typo&lastErrorPrefix=HTTP%20503');
    const widened = new URLSearchParams(narrowed.fields);
    widened.append('lastErrorPrfix', 'x');
    const refused = await confirm(widened);
    assert.equal(refused.status, 400);
    assert.match(refused.body, /unknown parameter/);
    const dead = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${outbox()} WHERE topic = 'order.typo' AND state = 'dead'`);
    assert.equal(dead[0]!.n, 2, 'nothing moved');
    assert.equal((await confirm(narrowed.fields)).status, 200, 'the preview is still there to confirm');
  });

  it('a confirm id works only from the session that previewed it; a post from another session moves nothing and leaves it to its owner', async () => {
    await db.query(`INSERT INTO ${outbox()} (topic, payload, state, attempt, last_error) VALUES ('order.owned', '{}', 'dead', 3, 'boom')`);
    const mine = await preview('topic=order.owned');
    // Another browser: its own session cookie and form token, and the first session's confirm id.
    const other = await call(server.url, { path: '/replay/preview?topic=order.owned' });
    const otherToken = /name="token" value="([^"]+)"/.exec(other.body)?.[1] ?? '';
    assert.notEqual(otherToken, '');
    const stolen = new URLSearchParams(mine.fields);
    stolen.set('token', otherToken);
    const refused = await call(server.url, { method: 'POST', path: '/replay', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: server.url, cookie: other.cookie }, body: stolen.toString() });
    assert.equal(refused.status, 409);
    assert.equal((await db.query<{ state: string }>(`SELECT state FROM ${outbox()} WHERE topic = 'order.owned'`))[0]!.state, 'dead');
    const done = await confirm(mine.fields);
    assert.equal(done.status, 200, 'the owner still confirms it');
    assert.match(done.body, /data-moved="1"/);
  });
});
