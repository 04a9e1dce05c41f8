/**
 * The console with rows at `scheduled_at = '-infinity'` or `'infinity'` (PostgreSQL's timestamptz
 * takes both; plain SQL can write them): the overview, the blocked page and the row page answer.
 * A row at `-infinity` is aged from when it was written; a key head parked at `infinity` is a
 * blocked head scheduled in the future. The console shows both as `infinity` and `-infinity`,
 * and a span to either as `∞` (not the latest or earliest date a `Date` holds, nor a number of days).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startConsoleServer, type ConsoleServer } from '../../lib/console/console-server.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { consoleCall as call } from './console-fixture.ts';

describe('console: rows scheduled at -infinity and infinity (PostgreSQL)', () => {
  let db: TestDatabase;
  let server: ConsoleServer;
  let cookie = '';
  const ids: Record<string, string> = {};

  before(async () => {
    db = await createTestDatabase({ inbox: { sources: { hooks: { type: 'sqs', consumption: 'push' } } } });
    server = await startConsoleServer({ driver: db.driver, config: db.config, port: 0 });
    const outbox = `"${db.schema}".outbox`;
    const inbox = `"${db.schema}".inbox`;
    const insert = async (name: string, sql: string) => (ids[name] = (await db.query<{ id: string }>(`${sql} RETURNING id`))[0]!.id);
    // A key head parked at infinity, with a row waiting behind it.
    await insert('parked', `INSERT INTO ${outbox} (topic, key, payload, scheduled_at) VALUES ('order.hold', 'k-park', '{}', 'infinity')`);
    await insert('behindParked', `INSERT INTO ${outbox} (topic, key, payload) VALUES ('order.hold', 'k-park', '{}')`);
    // A head in flight under a live lease, and a row at -infinity behind it, written 10 minutes ago.
    await insert('inFlight', `INSERT INTO ${outbox} (topic, key, payload, state, claim_token, lease_expires_at, claimed_at)
      VALUES ('order.x', 'k-neg', '{}', 'processing', gen_random_uuid(), clock_timestamp() + interval '10 minutes', clock_timestamp())`);
    await insert('sinceForever', `INSERT INTO ${outbox} (topic, key, payload, scheduled_at, created_at) VALUES ('order.x', 'k-neg', '{}', '-infinity', clock_timestamp() - interval '10 minutes')`);
    // A poison head at -infinity (it failed 3 times and was put back at -infinity by plain SQL), a row behind it.
    await insert('poison', `INSERT INTO ${outbox} (topic, key, payload, attempt, scheduled_at, last_error) VALUES ('order.p', 'k-poison', '{}', 3, '-infinity', 'boom')`);
    await insert('behindPoison', `INSERT INTO ${outbox} (topic, key, payload) VALUES ('order.p', 'k-poison', '{}')`);
    // A claim written with an infinite lease.
    await insert('forever', `INSERT INTO ${outbox} (topic, payload, state, claim_token, lease_expires_at, claimed_at) VALUES ('order.f', '{}', 'processing', gen_random_uuid(), 'infinity', clock_timestamp())`);
    // Inbox: an aggregate head parked at infinity with a row behind it; a push row at -infinity received 5 minutes ago.
    await insert('inboxParked', `INSERT INTO ${inbox} (source, idempotency_key, aggregate_id, payload, scheduled_at) VALUES ('hooks', 'a-1', 'A', '{}', 'infinity')`);
    await insert('inboxBehind', `INSERT INTO ${inbox} (source, idempotency_key, aggregate_id, payload) VALUES ('hooks', 'a-2', 'A', '{}')`);
    await insert('inboxSinceForever', `INSERT INTO ${inbox} (source, idempotency_key, payload, scheduled_at, created_at) VALUES ('hooks', 'b-1', '{}', '-infinity', clock_timestamp() - interval '5 minutes')`);
  });
  after(async () => {
    await server?.close();
    await db?.drop();
  });

  const get = async (path: string) => {
    const res = await call(server.url, { path, headers: cookie ? { cookie } : {} });
    cookie ||= res.cookie;
    assert.equal(res.status, 200, `${path}: ${res.body.slice(0, 400)}`);
    return res.body;
  };
  /** The text of the `<tr>` whose attributes match `attributes`. */
  const rowText = (body: string, attributes: RegExp) => {
    const row = [...body.matchAll(/<tr ([^>]*)>([\s\S]*?)<\/tr>/g)].find((m) => attributes.test(m[1]!));
    assert.ok(row, `a row ${attributes}`);
    return row[2]!.replace(/<[^>]+>/g, ' ').replace(/\s+/g, ' ').trim();
  };

  it('the overview answers: the oldest due age is the -infinity row’s time since written (outbox 10 min, inbox 5 min); the infinite lease is shown', async () => {
    const body = await get('/');
    assert.match(body, /data-table="outbox"[\s\S]*?data-oldest>10 min \d+ s</);
    assert.match(body, /data-table="inbox"[\s\S]*?data-oldest>5 min \d+ s</);
    assert.match(body, new RegExp(`${ids.forever}[\\s\\S]*?>∞ left<`), 'the lease at infinity: ∞ left, not an error nor a count of days');
  });

  it('the blocked page answers: the head parked at infinity is scheduled with a row behind it; the poison head at -infinity is due now', async () => {
    const body = await get('/blocked');
    const parked = rowText(body, /data-key="k-park" data-cause="scheduled"/);
    assert.match(parked, /^k-park \S+ order\.hold pending 1 of 5 infinity in ∞ — 1 scheduled in the future: first attempt in ∞ /, parked);
    const poison = rowText(body, /data-key="k-poison" data-cause="poison"/);
    assert.match(poison, / -infinity /, poison);
    assert.match(poison, /attempt 4 of 5 due now/, poison);
    assert.doesNotMatch(body, /data-key="k-neg"/, 'a head under a live lease is not blocked');
    assert.match(rowText(body, /data-key="A" data-cause="scheduled"/), / infinity in ∞ /);
    assert.doesNotMatch(body, /275760|271821/, 'no date at the limit of a Date is shown');
  });

  it('the row page answers for rows at infinity and -infinity', async () => {
    assert.match(await get(`/row/outbox/${ids.parked}`), /<li>infinity — due for its next attempt/);
    assert.match(await get(`/row/outbox/${ids.sinceForever}`), /<li>-infinity — due for its next attempt/);
    assert.match(await get(`/row/outbox/${ids.forever}`), /lease until infinity/);
    assert.match(await get(`/row/inbox/${ids.inboxSinceForever}`), /<li>-infinity — due for its next attempt/);
  });
});
