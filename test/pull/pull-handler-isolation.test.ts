/**
 * A pull handler's business transaction at the isolation level the application asks for:
 * `pgTransactionRunner(pool, { isolationLevel })`. The runner's `BEGIN` carries the level (the
 * first thing in the transaction's round trip, before the statement that reads the server
 * process, after which `SET TRANSACTION ISOLATION LEVEL` is refused), so a handler that needs
 * SERIALIZABLE gets it without a role default. Without the option the role's default holds, and a
 * level not among PostgreSQL's three is refused by name.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { createPullWorker, pgTransactionRunner, UsageError, type PullTransactionOptions } from '../../lib/index.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertPullRows, memoryLogger, readPullRows } from './pull-fixtures.ts';

describe("pull handler transactions at the application's isolation level", () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  /** Runs one pull row through a worker whose runner was made with `options`; returns what its handler's transaction saw. */
  async function handlerSees(source: string, options?: PullTransactionOptions): Promise<{ isolation: string; setAfterwards: string }> {
    await insertPullRows(db, source, [{ key: `${source}-1` }]);
    const seen: Array<{ isolation: string; setAfterwards: string }> = [];
    const worker = createPullWorker({
      driver: db.driver,
      source,
      metrics: false,
      logger: memoryLogger(),
      transactions: pgTransactionRunner(db.driver.pool, options),
      handler: async (_message, { transaction }) => {
        await transaction(async (tx) => {
          const { rows } = await tx.query<{ isolation: string }>(`SELECT current_setting('transaction_isolation') AS isolation`);
          // What the handler itself could not do: another level, once the transaction ran a statement.
          const other = rows[0]!.isolation === 'serializable' ? 'REPEATABLE READ' : 'SERIALIZABLE';
          const afterwards = await tx.query('SAVEPOINT s').then(() => tx.query(`SET TRANSACTION ISOLATION LEVEL ${other}`)).then(
            () => 'set',
            (error: { code?: string }) => error.code ?? 'error',
          );
          await tx.query('ROLLBACK TO SAVEPOINT s');
          seen.push({ isolation: rows[0]!.isolation, setAfterwards: afterwards });
        });
      },
    });
    const summary = await worker.runOnce();
    assert.equal(summary.completed, 1, JSON.stringify(summary));
    assert.deepEqual((await readPullRows(db, source)).map((r) => r.state), ['processed']);
    assert.equal(seen.length, 1);
    return seen[0]!;
  }

  it('serializable: the handler runs under SERIALIZABLE, and the row completes in that transaction', async () => {
    assert.deepEqual(await handlerSees('iso-serializable', { isolationLevel: 'serializable' }), { isolation: 'serializable', setAfterwards: '25001' });
  });

  it('repeatable read and read committed, as asked', async () => {
    assert.equal((await handlerSees('iso-repeatable', { isolationLevel: 'repeatable read' })).isolation, 'repeatable read');
    assert.equal((await handlerSees('iso-committed', { isolationLevel: 'read committed' })).isolation, 'read committed');
  });

  it("without the option, the role's default (read committed here)", async () => {
    const [row] = await db.query<{ level: string }>(`SELECT current_setting('default_transaction_isolation') AS level`);
    assert.deepEqual(await handlerSees('iso-default'), { isolation: row!.level, setAfterwards: '25001' });
  });

  it("on the worker's own pool, the runner counts as the default one: a pool too small for concurrency + 1 is refused", async () => {
    const driver = new PostgresDriver({ config: parseConfig({ database: { ...db.config.database, poolMax: 2 } }), url: db.url });
    const other = new pg.Pool({ connectionString: db.url, max: 2 });
    try {
      const build = (transactions: ReturnType<typeof pgTransactionRunner>) =>
        createPullWorker({ driver, source: 'iso-pool', concurrency: 2, metrics: false, logger: memoryLogger(), transactions, handler: async () => {} });
      // Handlers' transactions holding both connections would leave none for the renewals: every claim lost.
      assert.throws(() => build(pgTransactionRunner(driver.pool, { isolationLevel: 'serializable' })), (error: unknown) => error instanceof UsageError && /at least 3 connections/.test(error.message));
      assert.throws(() => build(pgTransactionRunner(driver.pool)), (error: unknown) => error instanceof UsageError && /at least 3 connections/.test(error.message));
      // On a pool of their own the handlers' transactions take nothing from the claims: not checked.
      assert.doesNotThrow(() => build(pgTransactionRunner(other, { isolationLevel: 'serializable' })));
    } finally {
      await other.end();
      await driver.close();
    }
  });

  it('a level PostgreSQL does not have is refused by name, before anything runs', () => {
    assert.throws(
      () => pgTransactionRunner(db.driver.pool, { isolationLevel: 'serialisable' as never }),
      (error: unknown) => error instanceof UsageError && /isolationLevel/.test(error.message) && /'serialisable'/.test(error.message) && /'serializable'/.test(error.message),
    );
    assert.throws(() => pgTransactionRunner(db.driver.pool, { isolation: 'serializable' } as never), (error: unknown) => error instanceof UsageError && /isolation\b/.test(error.message));
  });
});
