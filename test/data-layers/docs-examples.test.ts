/**
 * Runs every example of docs/data-layers.md against a fresh, migrated database (the examples use
 * the default schema, as an application would): each enqueue example leaves one pending
 * `order.paid` row; the pull example completes the pull row it claims. The page's imports of
 * `queuebox` and `queuebox/<library>` are pointed at the sources, the Prisma client at the one the
 * tests generate.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createScratchDatabase, type ScratchDatabase } from '../helpers/database.ts';
import { dataLayerExamples } from './docs-examples.ts';
import { generatePrismaClient, type GeneratedPrismaClient } from './prisma-client.ts';

const EXPECTED = ['Kysely', 'Drizzle (node-postgres; postgres.js alike)', 'Knex', 'postgres.js', 'TypeORM', 'Prisma', 'MikroORM', 'Sequelize'];
const PULL = 'Pull workers: `complete` in the same transaction';

/** The example with its imports pointed at this repository (and at the Prisma client generated in `prisma`). */
function localized(code: string, prisma: GeneratedPrismaClient): string {
  return code
    .replace(/from 'queuebox\/([a-z-]+)'/g, (_, lib: string) => `from '${resolve(`lib/data-layers/${lib}.ts`)}'`)
    .replace(/from 'queuebox'/g, `from '${resolve('lib/index.ts')}'`)
    .replace(/from '\.\/generated\/prisma\/client\.ts'/g, `from '${prisma.module}'`);
}

describe('docs/data-layers.md examples', () => {
  const examples = dataLayerExamples();
  let scratch: ScratchDatabase;
  let url: URL;
  let pool: pg.Pool;
  let dir: string;
  let prisma: GeneratedPrismaClient;
  const savedUrl = process.env.DATABASE_URL;

  before(async () => {
    scratch = await createScratchDatabase('qb_docs_');
    url = new URL(scratch.url);
    pool = new pg.Pool({ connectionString: url.href, max: 2 });
    dir = mkdtempSync(join(resolve('test/data-layers'), '.docs-run-'));
    prisma = await generatePrismaClient();
    process.env.DATABASE_URL = url.href;
  });
  after(async () => {
    process.env.DATABASE_URL = savedUrl;
    rmSync(dir, { recursive: true, force: true });
    prisma?.remove();
    await pool?.end();
    // A library's pool resolves `end()` before its sockets have closed: the drop waits for the
    // server to see them go, so that it terminates no connection a library still listens on.
    await scratch?.drop();
  });

  it('has one example per library and the pull example', () => {
    assert.deepEqual([...examples.keys()].sort(), [...EXPECTED, PULL].sort());
  });

  for (const heading of EXPECTED) {
    it(`runs the ${heading} example: one pending order.paid row`, async () => {
      const before = (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM outbox WHERE topic = 'order.paid' AND key = 'o-1' AND state = 'pending'`)).rows[0]!.n;
      const file = join(dir, `${heading.replace(/[^a-z]+/gi, '-')}.ts`);
      writeFileSync(file, localized(examples.get(heading)!, prisma));
      await import(file);
      const now = (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM outbox WHERE topic = 'order.paid' AND key = 'o-1' AND state = 'pending'`)).rows[0]!.n;
      assert.equal(now, before + 1);
    });
  }

  it('runs the pull example: the claimed row is completed in the Kysely transaction', async () => {
    const driver = new PostgresDriver({ config: parseConfig({ database: { url: url.href }, inbox: { sources: { partner: { type: 'sqs', queueName: 'partner-events', consumption: 'pull' } } } }), url: url.href });
    await driver.inboxInsert({ source: 'partner', idempotencyKey: 'docs-1', aggregateId: 'a-1', payload: { n: 1 }, consumption: 'pull' });
    await driver.close();
    const file = join(dir, 'pull.ts');
    writeFileSync(file, localized(examples.get(PULL)!, prisma));
    await import(file);
    assert.deepEqual((await pool.query(`SELECT idempotency_key, state FROM inbox`)).rows, [{ idempotency_key: 'docs-1', state: 'processed' }]);
  });
});
