/**
 * The operator console in a real browser (Debian's chromium via playwright-core) against a seeded
 * PostgreSQL: every page loads, planted stuck keys appear with their reasons, hostile text stays
 * text, secrets stay hidden, the overview refreshes itself, a replay dry run and confirm move
 * exactly the previewed rows, a dead inbox group is requeued from its preview, and a cross-site
 * form cannot replay anything.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { BrowserContext, Page } from 'playwright-core';
import { startConsoleServer, type ConsoleServer } from '../../lib/console/console-server.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { browserSkipReason, launchBrowser } from '../helpers/browser.ts';
import { PLANTED_SECRET, PLANTED_TRACE, seedConsoleRows, type ConsoleSeed } from './console-seed.ts';

const skip = browserSkipReason();

describe('operator console in a browser', { skip }, () => {
  let db: TestDatabase;
  let seed: ConsoleSeed;
  let consoleServer: ConsoleServer;
  let readOnly: ConsoleServer;
  let browser: { browser: BrowserContext; close(): Promise<void> };
  let page: Page;

  before(async () => {
    db = await createTestDatabase();
    seed = await seedConsoleRows(db);
    consoleServer = await startConsoleServer({ driver: db.driver, config: db.config, port: 0, allowActions: true });
    readOnly = await startConsoleServer({ driver: db.driver, config: db.config, port: 0 });
    browser = await launchBrowser();
    page = await browser.browser.newPage();
  });
  after(async () => {
    await browser?.close();
    await consoleServer?.close();
    await readOnly?.close();
    await db?.drop();
  });

  const outboxState = async (ids: string[]) =>
    Object.fromEntries((await db.query<{ id: string; state: string }>(`SELECT id, state FROM "${db.schema}".outbox WHERE id = ANY($1::uuid[])`, [ids])).map((r) => [r.id, r.state]));

  it('the overview shows rows per state, the oldest pending age and throughput, and refreshes without a reload', async () => {
    await page.goto(`${consoleServer.url}/`);
    const dead = page.locator('[data-table="outbox"] tr[data-state="dead"] td.num');
    assert.equal(await dead.textContent(), '5');
    assert.equal(await page.locator('[data-table="outbox"] tr[data-state="sent"] td.num').textContent(), '12');
    assert.match((await page.locator('[data-table="outbox"] [data-oldest]').textContent()) ?? '', /^\d+ s$/, 'the poison head, due seconds ago');
    assert.equal(await page.locator('[data-claims="outbox"] tr').count(), 2, 'header and the expired claim');
    await page.evaluate('window.marker = 42');
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state, updated_at) VALUES ('live', '{}', 'dead', clock_timestamp())`);
    await page.locator('[data-table="outbox"] tr[data-state="dead"] td.num', { hasText: /^6$/ }).waitFor({ timeout: 20_000 });
    assert.equal(await page.evaluate('window.marker'), 42, 'same page: refreshed in place');
  });

  it('blocked keys show the poison head, the expired lease and the retry backing off, each with its reason and the rows behind it', async () => {
    await page.goto(`${consoleServer.url}/blocked`);
    const row = (key: string) => page.locator(`table[data-blocked="outbox"] tr[data-key="${key}"]`);
    assert.equal(await row('order-poison').getAttribute('data-cause'), 'poison');
    assert.match((await row('order-poison').textContent()) ?? '', /poison row: 4 of 5 attempts failed and it keeps failing; attempt 5 of 5 [\s\S]*400 InvalidParameterValue/);
    assert.equal(await row('order-lease').getAttribute('data-cause'), 'expired-lease');
    assert.match((await row('order-lease').locator('.reason').textContent()) ?? '', /lease held by an invocation that died/);
    assert.equal(await row('order-retry').getAttribute('data-cause'), 'retry-backoff');
    assert.match((await row('order-retry').locator('.reason').textContent()) ?? '', /retry backing off: 1 of 5 attempts failed; attempt 2 of 5 in [0-4] min/);
    assert.equal(await row('order-lease').locator('td.num').nth(1).textContent(), '2', 'two rows wait behind the expired lease');
    assert.equal(await page.locator('table[data-blocked="outbox"] tbody tr').count(), 3);
  });

  it('dead rows filter by topic, show the full error and the payload as text with secrets redacted', async () => {
    await page.goto(`${consoleServer.url}/dead`);
    await page.fill('input[name="label"]', 'orders.failed');
    await page.click('button[type="submit"]');
    await page.waitForURL(/label=orders.failed/);
    assert.equal(await page.locator('[data-dead-row]').count(), 3);
    const text = (await page.locator('main').textContent()) ?? '';
    assert.ok(text.includes('<img src=x onerror="window.__xss=2">'), 'the error is shown as text');
    assert.ok(text.includes('<script>window.__xss = 1</script>'), 'the payload is shown as text');
    assert.ok(!text.includes(PLANTED_SECRET), 'the planted secret is redacted');
    assert.match(text, /"apiKey": "\*\*\*"/);
    assert.equal(await page.evaluate('window.__xss'), undefined, 'no planted script ran');
    await page.goto(`${consoleServer.url}/dead?table=inbox`);
    assert.match((await page.locator('[data-dead-row]').textContent()) ?? '', /relay gave up: no route for topic[\s\S]*"signature": "\*\*\*"/);
  });

  it('a row page shows its history, its columns and its trace context', async () => {
    await page.goto(`${consoleServer.url}/row/outbox/${seed.poisonHead}`);
    const history = (await page.locator('ol.history').textContent()) ?? '';
    assert.match(history, /created/);
    assert.match(history, /4 of 5 attempts failed/);
    assert.match((await page.locator('[data-last-error]').textContent()) ?? '', /InvalidParameterValue/);
    assert.equal(await page.locator('[data-trace-id]').textContent(), '6a17c3f0e3a1b2c4d5e6f708192a3b4c');
    assert.equal(await page.locator('[data-parent-span-id]').textContent(), '5d6e7f8091a2b3c4');
    assert.equal(await page.locator('[data-xray-trace-id]').textContent(), '1-6a17c3f0-e3a1b2c4d5e6f708192a3b4c');
    assert.equal(await page.locator('[data-sampled]').textContent(), 'yes');
    const trace = (await page.locator('[data-trace]').textContent()) ?? '';
    assert.match(trace, /tracestate\s*vendor: congo \(values not shown\)/);
    assert.ok(!trace.includes(PLANTED_TRACE.tracestate.split('=')[1]!), 'tracestate values are not shown');
    await page.goto(`${consoleServer.url}/row/outbox/${seed.retryHead}`);
    assert.equal(await page.locator('[data-trace]').textContent(), 'none');
    await page.goto(`${consoleServer.url}/row/outbox/${seed.deadOther[0]}`);
    assert.match((await page.locator('[data-trace]').textContent()) ?? '', /^invalid trace context/);
    assert.ok(!(await page.content()).includes('__xss = 3'), 'the stored value is not on the page');
    assert.equal(await page.evaluate('window.__xss'), undefined, 'no planted script ran');
    const missing = await page.goto(`${consoleServer.url}/row/outbox/00000000-0000-4000-8000-000000000000`);
    assert.equal(missing?.status(), 404);
  });

  it('replay: the dry run counts and lists the rows; the confirm moves exactly the previewed rows', async () => {
    await page.goto(`${consoleServer.url}/replay`);
    await page.fill('textarea[name="topics"]', 'orders.failed');
    await page.click('[data-action="dry-run"]');
    await page.waitForURL(/\/replay\/preview/);
    assert.equal(await page.locator('[data-preview-count]').getAttribute('data-preview-count'), '3');
    const previewed = await page.locator('table[data-preview] tr[data-id]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-id')!));
    assert.deepEqual([...previewed].sort(), [...seed.deadOrders].sort());
    assert.deepEqual(Object.values(await outboxState(seed.deadOrders)), ['dead', 'dead', 'dead'], 'a dry run moves nothing');
    // A row that dies after the preview matches the filter but was not previewed: it must stay dead.
    const [late] = (await db.query<{ id: string }>(`INSERT INTO "${db.schema}".outbox (topic, payload, state) VALUES ('orders.failed', '{}', 'dead') RETURNING id`)).map((r) => r.id);
    await page.click('[data-action="confirm"]');
    await page.waitForSelector('[data-moved]');
    assert.equal(await page.locator('[data-moved]').getAttribute('data-moved'), '3');
    const states = await outboxState([...seed.deadOrders, late!, ...seed.deadOther]);
    assert.deepEqual(seed.deadOrders.map((id) => states[id]), ['pending', 'pending', 'pending']);
    assert.equal(states[late!], 'dead', 'the row that died after the preview did not move');
    assert.deepEqual(seed.deadOther.map((id) => states[id]), ['dead', 'dead']);
  });

  it('replay of more rows than one confirm takes: the preview lists 100 and says so, the confirm moves exactly those 100', async () => {
    await db.query(
      `INSERT INTO "${db.schema}".outbox (topic, payload, state, created_at) SELECT 'bulk.failed', '{}', 'dead', clock_timestamp() - n * interval '1 second' FROM generate_series(1, 105) n`,
    );
    await page.goto(`${consoleServer.url}/replay/preview?topics=bulk.failed`);
    assert.equal(await page.locator('[data-preview-count]').getAttribute('data-preview-count'), '105');
    assert.match((await page.locator('main').textContent()) ?? '', /Only the 100 oldest rows are listed/);
    const listed = await page.locator('table[data-preview] tr[data-id]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-id')!));
    assert.equal(listed.length, 100);
    await page.click('[data-action="confirm"]');
    await page.waitForSelector('[data-moved]');
    assert.equal(await page.locator('[data-moved]').getAttribute('data-moved'), '100');
    const rows = await db.query<{ id: string; state: string }>(`SELECT id, state FROM "${db.schema}".outbox WHERE topic = 'bulk.failed'`);
    assert.deepEqual(rows.filter((r) => r.state === 'pending').map((r) => r.id).sort(), [...listed].sort(), 'the moved rows are the listed rows');
    assert.equal(rows.filter((r) => r.state === 'dead').length, 5);
  });

  it('a dead inbox group opens the preview of its rows, and the confirm requeues them', async () => {
    await page.goto(`${consoleServer.url}/dead?table=inbox`);
    const group = page.locator('table[data-dead-groups="inbox"] tr[data-group-count]');
    assert.equal(await group.count(), 1);
    assert.match((await group.textContent()) ?? '', /^1\s*payments\s*push\s*relay gave up: no route for topic/);
    await group.locator('[data-group-rows]').click();
    await page.waitForURL(/\/replay\/preview\?table=inbox/);
    assert.equal(await page.locator('[data-preview-count]').getAttribute('data-preview-count'), '1');
    assert.deepEqual(await page.locator('table[data-preview] tr[data-id]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-id'))), [seed.deadInbox]);
    await page.click('[data-action="confirm"]');
    await page.waitForSelector('[data-moved]');
    assert.equal(await page.locator('[data-moved]').getAttribute('data-moved'), '1');
    const [row] = await db.query<{ state: string; attempt: number; last_error: string | null }>(`SELECT state, attempt, last_error FROM "${db.schema}".inbox WHERE id = $1`, [seed.deadInbox]);
    assert.deepEqual(row, { state: 'pending', attempt: 0, last_error: null });
  });

  it('a bad replay filter is refused on the page with the key named, and moves nothing', async () => {
    const response = await page.goto(`${consoleServer.url}/replay/preview?createdFrom=yesterday`);
    assert.equal(response?.status(), 400);
    assert.match((await page.locator('[data-error]').textContent()) ?? '', /createdFrom/);
  });

  it('a read-only console previews but offers no confirm, and refuses a forged confirm', async () => {
    await page.goto(`${readOnly.url}/replay/preview?topics=invoices.sent`);
    assert.equal(await page.locator('[data-preview-count]').getAttribute('data-preview-count'), '2');
    assert.equal(await page.locator('[data-action="confirm"]').count(), 0);
    assert.match((await page.locator('main').textContent()) ?? '', /--allow-actions/);
    const status = await page.evaluate(async (id) => {
      const response = await fetch('/replay', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `ids=${id}&states=dead` });
      return response.status;
    }, seed.deadOther[0]!);
    assert.equal(status, 403, 'a same-origin post without the form token is refused');
    assert.deepEqual(Object.values(await outboxState(seed.deadOther)), ['dead', 'dead']);
  });

  it('a page on another origin cannot replay through the console (Origin check and form token)', async () => {
    const evil: Server = createServer((_, response) => {
      response.writeHead(200, { 'content-type': 'text/html' });
      response.end(`<form id="f" method="post" action="${consoleServer.url}/replay"><input name="ids" value="${seed.deadOther[0]}"><input name="states" value="dead"><input name="token" value="guess"></form><script>document.getElementById('f').submit()</script>`);
    });
    await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', resolve));
    try {
      await page.goto(`http://localhost:${(evil.address() as AddressInfo).port}/`);
      await page.waitForURL(`${consoleServer.url}/replay`);
      assert.match((await page.textContent('body')) ?? '', /refused/);
      assert.deepEqual(Object.values(await outboxState(seed.deadOther)), ['dead', 'dead']);
    } finally {
      evil.close();
    }
  });
});
