/**
 * What a link can make the console do: a deep dead-rows page reads the payloads of its own rows
 * only (keyset paging; an old `skip` link reads one page), and a link followed from another site
 * runs no read at all until the operator opens it from the console.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { describe, it } from 'node:test';
import pg from 'pg';
import { startConsoleServer, type ConsoleServer } from '../../lib/console/console-server.ts';
import type { TestDatabase } from '../helpers/database.ts';
import { withConsoleServer } from './console-fixture.ts';

function call(url: string, path: string, headers: Record<string, string> = {}) {
  const target = new URL(url);
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request({ host: target.hostname, port: target.port, path, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

const ROWS = 400;

describe('console: a link reads no more than the rows it shows', { timeout: 120_000 }, () => {
  let db: TestDatabase;
  let server: ConsoleServer;
  withConsoleServer({}, (d, s) => {
    db = d;
    server = s;
  });

  /** Blocks of the outbox's TOAST table (where large payloads live) read by the console for `path`, on a connection of its own. */
  async function toastBlocks(path: string): Promise<{ blocks: number; body: string }> {
    const counter = async () =>
      Number(
        (await db.query<{ n: string }>(
          `SELECT COALESCE(heap_blks_read, 0) + COALESCE(heap_blks_hit, 0) AS n FROM pg_statio_all_tables
            WHERE relid = (SELECT reltoastrelid FROM pg_class WHERE oid = '"${db.schema}".outbox'::regclass)`,
        ))[0]!.n,
      );
    const driver = db.newDriver();
    const own = await startConsoleServer({ driver, config: db.config, port: 0 });
    const start = await counter();
    const res = await call(own.url, path);
    assert.equal(res.status, 200, res.body.slice(0, 300));
    await own.close();
    // A backend reports its I/O statistics when its connection ends.
    await driver.close();
    let now = await counter();
    for (let n = 0; n < 100 && now === start; n++) {
      await new Promise((r) => setTimeout(r, 100));
      now = await counter();
    }
    return { blocks: now - start, body: res.body };
  }

  it('a deep page and an old skip link each read about one page of payloads, whatever their depth', async () => {
    // ROWS dead rows in one millisecond (a batch), each with a payload of about 19 KB stored out of
    // line. Written on a connection of its own that has ended (its backend gone) before anything is
    // measured: a backend reports its TOAST writes when it ends or goes idle, which could otherwise
    // land inside a measurement below.
    const writer = new pg.Client({ connectionString: db.url });
    await writer.connect();
    const writerPid = (await writer.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    await writer.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state, updated_at)
      SELECT 'big', jsonb_build_object('blob', (SELECT string_agg(md5(random()::text || g || n), '') FROM generate_series(1, 600) g)), 'dead',
             '2026-11-30T10:00:00.123Z'::timestamptz + (n % 7) * interval '1 microsecond'
        FROM generate_series(1, ${ROWS}) n`);
    await writer.end();
    for (let n = 0; n < 100 && (await db.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1`, [writerPid])).length > 0; n++) await new Promise((r) => setTimeout(r, 50));
    const perRow = Number((await db.query<{ pages: string }>(`SELECT pg_relation_size(reltoastrelid) / 8192 AS pages FROM pg_class WHERE oid = '"${db.schema}".outbox'::regclass`))[0]!.pages) / ROWS;
    assert.ok(perRow >= 1, `payloads are stored out of line (${perRow} TOAST pages a row)`);
    const bound = 26 * perRow * 2;
    const [deepAt, deepId] = (
      await db.query<{ at: string; id: string }>(
        `SELECT to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at, id FROM "${db.schema}".outbox
          WHERE topic = 'big' ORDER BY updated_at DESC, id DESC OFFSET ${ROWS - 26} LIMIT 1`,
      )
    ).map((r) => [r.at, r.id])[0]!;
    const deep = await toastBlocks(`/dead?label=big&before=${encodeURIComponent(`${deepAt}~${deepId}`)}`);
    assert.equal(deep.body.match(/data-dead-row=/g)?.length, 25, 'the last full page');
    assert.ok(deep.blocks <= bound, `the deep page read ${deep.blocks} TOAST blocks (one page is about ${Math.round(26 * perRow)})`);
    const skip = await toastBlocks(`/dead?label=big&skip=${ROWS - 25}`);
    assert.ok(skip.blocks <= bound, `a skip link read ${skip.blocks} TOAST blocks (one page is about ${Math.round(26 * perRow)})`);
  });

  it('a link followed from another site gets a page naming it and runs no search; the same link opened from the console runs it', async () => {
    const path = '/dead?label=big';
    const foreign = { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' };
    for (const headers of [foreign, { ...foreign, 'sec-fetch-site': 'same-site' }]) {
      const res = await call(server.url, path, headers);
      assert.equal(res.status, 200);
      assert.match(res.body, /data-foreign-link/);
      assert.match(res.body, /<a href="\/dead\?label=big"><code>\/dead\?label=big<\/code><\/a>/);
      assert.doesNotMatch(res.body, /data-dead-row/);
    }
    const own = await call(server.url, path, { ...foreign, 'sec-fetch-site': 'same-origin' });
    assert.match(own.body, /data-dead-row/);
    const typed = await call(server.url, path, { ...foreign, 'sec-fetch-site': 'none' });
    assert.match(typed.body, /data-dead-row/, 'an address typed or bookmarked is the operator\'s own');
    const overview = await call(server.url, '/', foreign);
    assert.match(overview.body, /Overview/, 'the overview (bounded counts) opens from a link');
    const sneaky = await call(server.url, '/%5Cevil.example/x', foreign);
    assert.match(sneaky.body, /<a href="\/%5Cevil\.example\/x">/, 'the named link stays on the console');
  });
});
