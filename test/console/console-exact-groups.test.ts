/**
 * A dead group's "rows and replay…" link previews exactly that group — not the other groups of its
 * topic — when the error is a start of another group's error, starts with a masked secret or is
 * missing, and when the topic itself holds a configured secret (which no link carries); the confirm
 * of that preview moves exactly the group's rows. A group no exact link can select without its
 * secret has no link, and the page says why. Over HTTP against real PostgreSQL.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startConsoleServer, type ConsoleServer } from '../../lib/console/console-server.ts';
import { groupErrorStart } from '../../lib/console/dead-group.ts';
import { GROUP_PREVIEW_SCAN } from '../../lib/console/replay-page.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { consoleCall as call } from './console-fixture.ts';

const attr = (value: string) => value.replace(/&amp;/g, '&').replace(/&quot;/g, '"').replace(/&#39;/g, "'");

/** A configured secret (the `tokenEnv` of an inbox source) that also occurs in topics and errors. */
const SECRET = 'S3cretPartnerTok';

describe('dead group error starts', () => {
  it('are cut and compared as each database does: code points on PostgreSQL; UTF-16 units, trailing spaces ignored, on SQL Server', () => {
    const error = `${'😀'.repeat(3)}abc  `;
    assert.equal(groupErrorStart('postgres', error, 4), '😀😀😀a');
    assert.equal(groupErrorStart('sqlserver', error, 4), '😀😀');
    assert.equal(groupErrorStart('postgres', 'abc  ', 120), 'abc  ');
    assert.equal(groupErrorStart('sqlserver', 'abc  ', 120), 'abc');
    assert.equal(groupErrorStart('postgres', null), null);
  });
});

describe('console: a dead group link previews and replays exactly its group', () => {
  let db: TestDatabase;
  let server: ConsoleServer;
  let cookie = '';
  const outbox = () => `"${db.schema}".outbox`;
  const inbox = () => `"${db.schema}".inbox`;

  before(async () => {
    db = await createTestDatabase({ inbox: { sources: { partner: { type: 'http', path: '/partner', auth: { type: 'bearer', tokenEnv: 'PARTNER_TOKEN' } } } } });
    server = await startConsoleServer({ driver: db.driver, config: db.config, env: { PARTNER_TOKEN: SECRET }, port: 0, allowActions: true });
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
  const deadOutbox = async (topic: string, n: number, error: string | null) =>
    (await db.query<{ id: string }>(`INSERT INTO ${outbox()} (topic, payload, state, attempt, last_error) SELECT $1, '{}', 'dead', 4, $2 FROM generate_series(1, $3::int) RETURNING id`, [topic, error, n])).map((r) => r.id);
  const deadInbox = async (source: string, consumption: 'push' | 'pull', n: number, error: string | null) =>
    (
      await db.query<{ id: string }>(
        `INSERT INTO ${inbox()} (source, idempotency_key, payload, consumption, state, attempt, last_error)
         SELECT $1::text, gen_random_uuid()::text, '{}', $2::text, 'dead', 3, $3::text FROM generate_series(1, $4::int) RETURNING id`,
        [source, consumption, error, n],
      )
    ).map((r) => r.id);
  const pending = async (table: string, ids: string[]) => Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM ${table} WHERE id = ANY($1::uuid[]) AND state = 'pending'`, [ids]))[0]!.n);

  /** The groups of a dead page: count, the cells' text, and the link (undefined when none). */
  async function groups(path: string): Promise<Array<{ count: number; text: string; link: string | undefined }>> {
    const page = await get(path);
    assert.equal(page.status, 200);
    const table = /<table data-dead-groups="(?:outbox|inbox)">([\s\S]*?)<\/table>/.exec(page.body)?.[1] ?? '';
    return [...table.matchAll(/<tr data-group-count="(\d+)">([\s\S]*?)<\/tr>/g)].map((m) => ({
      count: Number(m[1]),
      text: m[2]!.replace(/<[^>]+>/g, ' ').replace(/\s+/g, ' ').trim(),
      link: /href="([^"]+)" data-group-rows/.exec(m[2]!)?.[1],
    }));
  }

  /** Opens a group link: the preview's count and the ids its confirm form lists, and the form as a browser posts it. */
  async function open(link: string) {
    const res = await get(attr(link));
    assert.equal(res.status, 200, res.body.slice(0, 400));
    const count = Number(/data-preview-count="(\d+)"/.exec(res.body)?.[1]);
    const form = /<form method="post" action="\/replay">([\s\S]*?)<\/form>/.exec(res.body)?.[1] ?? '';
    const fields = new URLSearchParams();
    for (const m of form.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) fields.append(m[1]!, m[2]!);
    return { count, ids: fields.getAll('ids').sort(), fields, body: res.body };
  }
  const confirm = (fields: URLSearchParams) =>
    call(server.url, { method: 'POST', path: '/replay', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: server.url, cookie }, body: fields.toString() });

  it('the groups of one topic: an error that starts with a masked token, no error, and an error that is the start of another group\'s', async () => {
    const http500 = await deadOutbox('orders', 30, 'HTTP 500 from orders endpoint');
    const masked = await deadOutbox('orders', 2, 'sk_live_abcdefghijklmnopqrstuvwx rejected by the payment provider');
    const none = await deadOutbox('orders', 1, null);
    const short = await deadOutbox('orders', 3, 'HTTP 500');
    const elsewhere = await deadOutbox('orders.eu', 4, 'HTTP 500');
    const expected: Record<string, string[]> = { 30: http500, 2: masked, 1: none, 3: short, 4: elsewhere };
    const found = await groups('/dead');
    assert.deepEqual(found.map((g) => g.count).sort((a, b) => a - b), [1, 2, 3, 4, 30]);
    for (const group of found) {
      assert.ok(group.link, `${group.text}: has a link`);
      assert.ok(!attr(group.link).includes('sk_live_abcdef'), 'a link never carries a masked token');
      const preview = await open(group.link);
      assert.equal(preview.count, group.count, `${group.text}: the preview counts the group's rows only`);
      assert.deepEqual(preview.ids, [...expected[group.count]!].sort(), `${group.text}: and lists exactly them`);
    }
    // The confirm of the masked group's preview moves its two rows and nothing else.
    const maskedLink = found.find((g) => g.count === 2)!.link!;
    const done = await confirm((await open(maskedLink)).fields);
    assert.equal(done.status, 200);
    assert.match(done.body, /data-moved="2"/);
    assert.equal(await pending(outbox(), masked), 2);
    assert.equal(await pending(outbox(), [...http500, ...none, ...short, ...elsewhere]), 0, 'no row of another group moved');
    // The group without an error: its one row only.
    const noneLink = found.find((g) => g.count === 1)!.link!;
    assert.match(await confirm((await open(noneLink)).fields).then((r) => r.body), /data-moved="1"/);
    assert.equal(await pending(outbox(), none), 1);
    assert.equal(await pending(outbox(), [...http500, ...short, ...elsewhere]), 0);
    await db.query(`DELETE FROM ${outbox()}`);
  });

  it('errors cut where the database cuts them: 120 code points on PostgreSQL, emoji included', async () => {
    // 125 code points (225 UTF-16 units): its group is its first 120 code points. 119 code points: a group of its own.
    const long = await deadOutbox('emoji', 2, `${'😀'.repeat(100)}${'a'.repeat(25)}`);
    const short = await deadOutbox('emoji', 1, `${'😀'.repeat(100)}${'a'.repeat(19)}`);
    const found = (await groups('/dead')).filter((g) => g.text.includes('emoji'));
    assert.deepEqual(found.map((g) => g.count).sort(), [1, 2]);
    for (const group of found) {
      const preview = await open(group.link!);
      assert.equal(preview.count, group.count);
      assert.deepEqual(preview.ids, [...(group.count === 2 ? long : short)].sort());
    }
    await db.query(`DELETE FROM ${outbox()}`);
  });

  it('a topic holding a configured secret: shown masked, never put in a link, and its group link is still exact', async () => {
    const secretTopic = await deadOutbox(`partner.${SECRET}`, 2, 'timeout after 10 s');
    const sameError = await deadOutbox('partner.other', 3, 'timeout after 10 s');
    const unlinkable = await deadOutbox(`partner.${SECRET}`, 1, null);
    const page = await get('/dead');
    assert.ok(!page.body.includes(SECRET), 'the secret is nowhere on the page, links included');
    assert.ok(!page.body.includes(encodeURIComponent(SECRET)));
    assert.match(page.body, /partner\.\*\*\*/, 'the topic is shown masked');
    const found = await groups('/dead');
    const secretGroup = found.find((g) => g.count === 2)!;
    assert.ok(secretGroup.link);
    assert.doesNotMatch(attr(secretGroup.link), /[?&]topic=/, 'the link leaves the topic out');
    const preview = await open(secretGroup.link);
    assert.equal(preview.count, 2);
    assert.deepEqual(preview.ids, [...secretTopic].sort(), 'the rows of the group only, not those of another topic with the same error');
    assert.ok(!preview.body.includes(SECRET), 'the preview masks the topic too');
    const done = await confirm(preview.fields);
    assert.match(done.body, /data-moved="2"/);
    assert.equal(await pending(outbox(), sameError), 0);
    // Topic with the secret and no error: no filter a link may carry selects it without the secret.
    const none = found.find((g) => g.count === 1)!;
    assert.equal(none.link, undefined, 'no link rather than an inexact one');
    assert.match(page.body, /data-group-unlinked>A group without that link has a topic holding a masked value/);
    assert.equal(await pending(outbox(), unlinkable), 0);
    await db.query(`DELETE FROM ${outbox()}`);
  });

  it('inbox: the no-error group of a source previews its rows only, not the source\'s other groups or the other consumption', async () => {
    const none = await deadInbox('billing', 'pull', 2, null);
    const failing = await deadInbox('billing', 'pull', 3, 'handler threw');
    const push = await deadInbox('billing', 'push', 1, null);
    const found = await groups('/dead?table=inbox');
    const noneGroup = found.find((g) => g.count === 2)!;
    const preview = await open(noneGroup.link!);
    assert.equal(preview.count, 2);
    assert.deepEqual(preview.ids, [...none].sort());
    assert.match((await confirm(preview.fields)).body, /data-moved="2"/);
    assert.equal(await pending(inbox(), none), 2);
    assert.equal(await pending(inbox(), [...failing, ...push]), 0);
  });

  it('when the link\'s filters match more rows than a preview reads, it lists the group\'s rows among them, says "at least", and never another group\'s', async () => {
    // Received first, died last (so among the rows the dead page groups).
    const old = (
      await db.query<{ id: string }>(`INSERT INTO ${outbox()} (topic, payload, state, attempt, last_error, created_at, updated_at) SELECT 'bulk', '{}', 'dead', 4, 'HTTP 500', now() - interval '1 day', now() + interval '1 minute' FROM generate_series(1, 2) RETURNING id`)
    ).map((r) => r.id);
    await db.query(`INSERT INTO ${outbox()} (topic, payload, state, attempt, last_error) SELECT 'bulk', '{}', 'dead', 4, 'HTTP 500 from bulk ' || g FROM generate_series(1, ${GROUP_PREVIEW_SCAN}) g`);
    const [newest] = await deadOutbox('bulk', 1, 'HTTP 500');
    const link = (await groups('/dead')).find((g) => g.count === 3)!.link!;
    const preview = await open(link);
    assert.match(preview.body, /data-preview-count="2" data-preview-table="outbox" data-preview-incomplete>Dry run: <strong>at least 2<\/strong>/);
    assert.match(preview.body, new RegExp(`among the oldest ${GROUP_PREVIEW_SCAN.toLocaleString('en-US')} of the ${(GROUP_PREVIEW_SCAN + 3).toLocaleString('en-US')} dead rows`));
    assert.deepEqual(preview.ids, [...old].sort(), 'the group\'s rows among those read, and no row of another group');
    assert.match((await confirm(preview.fields)).body, /data-moved="2"/);
    const again = await open(link);
    assert.equal(again.count, 0);
    assert.match(again.body, /Replay its rows from the dead rows page/);
    assert.equal(await pending(outbox(), [newest!]), 0);
    await db.query(`DELETE FROM ${outbox()}`);
  });

  it('a group link with states other than dead, or a digest no group link carries, is a 400 or finds nothing', async () => {
    const [id] = await deadOutbox('orders.late', 1, 'HTTP 502');
    const link = attr((await groups('/dead')).find((g) => g.text.includes('orders.late'))!.link!);
    const sent = await get(`${link}&states=sent`);
    assert.equal(sent.status, 400);
    assert.match(sent.body, /a dead group&#39;s rows are dead rows/);
    const malformed = await get(link.replace(/group=[0-9a-f]+/, 'group=xyz'));
    assert.equal(malformed.status, 400);
    assert.match(malformed.body, /group must be the value a dead group&#39;s link carries/);
    const stale = await open(link.replace(/group=[0-9a-f]+/, `group=${'0'.repeat(32)}`));
    assert.equal(stale.count, 0);
    assert.match(stale.body, /after a restart of the console, open Dead rows again/);
    assert.equal(await pending(outbox(), [id!]), 0);
  });
});
