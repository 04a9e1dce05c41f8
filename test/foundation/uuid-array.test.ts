import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { after, before, describe, it } from 'node:test';
import { enqueue } from '../../lib/index.ts';
import { binaryUuidArray, uuidArrayParam } from '../../lib/db/postgres/uuid-array.ts';
import { createTestDatabase, testDatabaseUrl, type TestDatabase } from '../helpers/database.ts';
import { runTsx } from '../helpers/run-tsx.ts';

describe('uuid[] bind values in binary format', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  const readBack = async (value: unknown): Promise<string[]> => {
    const { rows } = await db.pool.query<{ ids: string[] }>('SELECT $1::uuid[]::text[] AS ids', [value]);
    return rows[0]!.ids;
  };

  it('the server reads back every id, in order, as it reads their text', async () => {
    const ids = Array.from({ length: 1000 }, () => randomUUID());
    const binary = uuidArrayParam(db.pool, ids);
    assert.ok(Buffer.isBuffer(binary), 'ids in the 36-character form go in binary');
    assert.equal(binary.length, 20 + 20 * 1000);
    assert.deepEqual(await readBack(binary), ids);
    assert.deepEqual(await readBack(binary), await readBack(ids));
  });

  it('reads upper-case digits as PostgreSQL does, and an array of none or one', async () => {
    const upper = ['A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '00000000-0000-0000-0000-000000000000'];
    assert.deepEqual(await readBack(binaryUuidArray(upper)), await readBack(upper));
    assert.deepEqual(await readBack(binaryUuidArray([])), []);
    assert.deepEqual(await readBack(binaryUuidArray([upper[0]]))!, [upper[0]!.toLowerCase()]);
    const { rows } = await db.pool.query<{ n: number }>('SELECT cardinality($1::uuid[]) AS n', [binaryUuidArray([])]);
    assert.equal(rows[0]!.n, 0);
  });

  it('leaves any other form as text, so the server reads it or names the bad value', async () => {
    const good = randomUUID();
    for (const other of [
      `{${good}}`, // braces: PostgreSQL reads it
      good.replaceAll('-', ''), // no hyphens: PostgreSQL reads it
      `${good.slice(0, 8)}x${good.slice(9)}`,
      `${good.slice(0, 35)}g`,
      `${good.slice(0, 35)}é`,
      '',
      'not-a-uuid',
    ]) {
      assert.equal(binaryUuidArray([good, other]), undefined, other);
      assert.deepEqual(uuidArrayParam(db.pool, [good, other]), [good, other]);
    }
    assert.deepEqual(await readBack(uuidArrayParam(db.pool, [good, `{${good}}`])), [good, good]);
    await assert.rejects(readBack(uuidArrayParam(db.pool, [good, 'not-a-uuid'])), /invalid input syntax for type uuid: "not-a-uuid"/);
  });

  it("goes in text through anything but pg's JavaScript client", async () => {
    const ids = [randomUUID()];
    assert.equal(uuidArrayParam({ query: async () => ({ rows: [] }) }, ids), ids);
    assert.ok(Buffer.isBuffer(uuidArrayParam(db.pool, ids)));
    // A caller's pool on another client class (as `Client: pg.native.Client`): pg-native sends
    // every bind value as text, a Buffer as an empty string.
    class OtherClient {}
    const other = new pg.Pool({ connectionString: db.url, Client: OtherClient as never });
    assert.equal(uuidArrayParam(other, ids), ids);
    await other.end();
    // A pool on a client class that extends pg's own sends binary, and the write lands.
    class Extended extends pg.Client {}
    const extended = new pg.Pool({ connectionString: db.url, Client: Extended });
    try {
      assert.ok(Buffer.isBuffer(uuidArrayParam(extended, ids)));
      const { rows } = await extended.query<{ ids: string[] }>('SELECT $1::uuid[]::text[] AS ids', [uuidArrayParam(extended, ids)]);
      assert.deepEqual(rows[0]!.ids, ids);
    } finally {
      await extended.end();
    }
  });

  it('goes in text when pg is loaded with NODE_PG_FORCE_NATIVE (its client is then the native one)', async () => {
    // pg-native needs libpq to build; a stand-in module is enough for pg to load its native client class.
    const dir = mkdtempSync(join(tmpdir(), 'queuebox-pg-native-'));
    try {
      mkdirSync(join(dir, 'node_modules', 'pg-native'), { recursive: true });
      writeFileSync(join(dir, 'node_modules', 'pg-native', 'index.js'), 'module.exports = function Native() {};\n');
      const script = `const pg = (await import('pg')).default;
        const { uuidArrayParam } = await import(${JSON.stringify(new URL('../../lib/db/postgres/uuid-array.ts', import.meta.url).href)});
        const pool = new pg.Pool();
        console.log(JSON.stringify({ client: pg.Client.name, text: Array.isArray(uuidArrayParam(pool, [${JSON.stringify(randomUUID())}])) }));
        await pool.end();`;
      const run = await runTsx(['--input-type=module', '-e', script], { ...process.env, NODE_PATH: join(dir, 'node_modules'), NODE_PG_FORCE_NATIVE: '1', DATABASE_URL: testDatabaseUrl() });
      assert.equal(run.code, 0, run.stderr);
      assert.deepEqual(JSON.parse(run.stdout.trim()), { client: '', text: true }, run.stdout);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a fenced write given an id that is no uuid fails with the server error and writes nothing', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await enqueue(client, { topic: 't', payload: { n: 1 } }, { schema: db.schema });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const claimed = await db.driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 });
    assert.equal(claimed.length, 1);
    await assert.rejects(db.driver.outboxMarkSentMany({ claims: [{ id: claimed[0]!.id, token: claimed[0]!.claimToken }, { id: 'nope', token: claimed[0]!.claimToken }] }), /uuid/);
    const { rows } = await db.pool.query<{ state: string }>(`SELECT state FROM "${db.schema}".outbox WHERE id = $1`, [claimed[0]!.id]);
    assert.equal(rows[0]!.state, 'processing');
    assert.deepEqual(await db.driver.outboxMarkSentMany({ claims: [{ id: claimed[0]!.id.toUpperCase(), token: claimed[0]!.claimToken.toUpperCase() }] }), [claimed[0]!.id.toUpperCase()]);
  });
});
