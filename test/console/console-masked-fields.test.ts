/**
 * A configured secret is masked wherever it occurs: not only in errors, payloads and headers but in
 * the topic, key, source, aggregate id, event type, correlation id and idempotency key a row
 * carries, on every page that shows them (overview claims, blocked keys, dead rows of both tables,
 * row pages, replay previews), and never put in a link. Over HTTP against real PostgreSQL.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startConsoleServer, type ConsoleServer } from '../../lib/console/console-server.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { consoleCall as call } from './console-fixture.ts';

const SECRET = 'S3cretPartnerTok';

describe('console: a configured secret in any field of a row is masked', () => {
  let db: TestDatabase;
  let server: ConsoleServer;
  before(async () => {
    db = await createTestDatabase({ inbox: { sources: { partner: { type: 'http', path: '/partner', auth: { type: 'bearer', tokenEnv: 'PARTNER_TOKEN' } } } } });
    server = await startConsoleServer({ driver: db.driver, config: db.config, env: { PARTNER_TOKEN: SECRET }, port: 0, allowActions: true });
  });
  after(async () => {
    await server?.close();
    await db?.drop();
  });

  it('topic, key, source, aggregate id, event type, correlation id and idempotency key: shown as ***, on every page', async () => {
    const o = `"${db.schema}".outbox`;
    const i = `"${db.schema}".inbox`;
    const [poison] = await db.query<{ id: string }>(
      `INSERT INTO ${o} (topic, key, payload, state, attempt, last_error, scheduled_at) VALUES ($1, $2, '{}', 'pending', 3, 'HTTP 500', now() + interval '1 hour') RETURNING id`,
      [`partner.${SECRET}`, `key-${SECRET}`],
    );
    await db.query(`INSERT INTO ${o} (topic, key, payload, state) VALUES ($1, $2, '{}', 'pending')`, [`partner.${SECRET}`, `key-${SECRET}`]);
    const [dead] = await db.query<{ id: string }>(`INSERT INTO ${o} (topic, key, payload, state, attempt, last_error) VALUES ($1, $2, '{}', 'dead', 4, 'x') RETURNING id`, [`partner.${SECRET}`, `key-${SECRET}`]);
    const [claimed] = await db.query<{ id: string }>(
      `INSERT INTO ${o} (topic, key, payload, state, attempt, claimed_at, lease_expires_at) VALUES ($1, $2, '{}', 'processing', 1, now(), now() + interval '1 minute') RETURNING id`,
      [`claimed.${SECRET}`, `claim-${SECRET}`],
    );
    const [received] = await db.query<{ id: string }>(
      `INSERT INTO ${i} (source, idempotency_key, aggregate_id, event_type, correlation_id, payload, state, last_error, attempt) VALUES ('partner', $1, $2, $3, $4, '{}', 'dead', 'x', 2) RETURNING id`,
      [`idem-${SECRET}`, `agg-${SECRET}`, `type-${SECRET}`, `corr-${SECRET}`],
    );
    const pages = ['/', '/blocked', '/dead', '/dead?table=inbox', `/row/outbox/${poison!.id}`, `/row/outbox/${dead!.id}`, `/row/outbox/${claimed!.id}`, `/row/inbox/${received!.id}`, '/replay/preview?lastErrorPrefix=x', '/replay/preview?table=inbox&lastErrorPrefix=x'];
    for (const path of pages) {
      const res = await call(server.url, { path });
      assert.equal(res.status, 200, path);
      for (const form of [SECRET, encodeURIComponent(SECRET), Buffer.from(SECRET).toString('base64').slice(0, 12)]) {
        assert.ok(!res.body.includes(form), `${path}: the secret (${form}) is not on the page: …${res.body.slice(Math.max(0, res.body.indexOf(form) - 80), res.body.indexOf(form) + 20)}…`);
      }
    }
    const row = (await call(server.url, { path: `/row/inbox/${received!.id}` })).body;
    for (const masked of ['idem-***', 'agg-***', 'type-***', 'corr-***']) assert.ok(row.includes(masked), `the inbox row page shows ${masked}`);
    const blocked = (await call(server.url, { path: '/blocked' })).body;
    assert.match(blocked, /<tr data-key="key-\*\*\*" data-cause="poison"><td><code>key-\*\*\*<\/code><\/td>/);
    assert.match(blocked, /<a href="\/dead\?table=outbox" data-dead-of-table>dead outbox rows →<\/a>/, 'the link to the dead rows leaves the topic out');
    assert.match((await call(server.url, { path: '/' })).body, /<td>claimed\.\*\*\*<\/td><td>claim-\*\*\*<\/td>/);
  });
});
