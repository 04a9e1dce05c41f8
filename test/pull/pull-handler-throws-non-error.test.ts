import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker } from '../../lib/index.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertPullRows, readPullRows } from './pull-fixtures.ts';

/**
 * A handler may throw a value that is not an Error, even an object without a prototype (a parsed
 * error body built with `Object.create(null)`; `String()` throws on it). The run is retried or
 * dead-lettered like any failed run, counted, and logged with the value described.
 */
describe('pull worker: a handler that throws an object without a prototype', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({});
  });
  after(async () => db.drop());

  const recordingLogger = () => {
    const lines: Array<{ message: string; error: unknown }> = [];
    const log = (message: string, attributes: Record<string, unknown> = {}) => void lines.push({ message, error: attributes.error });
    return { lines, warn: log, error: log };
  };
  const poison = () => Object.assign(Object.create(null) as Record<string, unknown>, { code: 'E_POISON', detail: 'bad order' });

  it('is dead-lettered at its last attempt, counted as dead and logged with the value', async () => {
    await insertPullRows(db, 'ne', [{ key: 'ne-1' }]);
    const logger = recordingLogger();
    const worker = createPullWorker({
      driver: db.newDriver(),
      source: 'ne',
      retry: { maxAttempts: 1 },
      metrics: false,
      logger,
      handler: async () => {
        throw poison();
      },
    });
    const summary = await worker.runOnce();
    const [row] = await readPullRows(db, 'ne');
    assert.equal(row!.state, 'dead');
    assert.equal(row!.last_error, 'gave up after 1 of 1 attempts: {"code":"E_POISON","detail":"bad order"}');
    assert.equal(summary.dead, 1);
    assert.deepEqual(logger.lines, [{ message: 'pull message dead-lettered after its last attempt', error: '{"code":"E_POISON","detail":"bad order"}' }]);
  });

  it('thrown after its transaction committed: the row stays processed and the value is logged', async () => {
    await insertPullRows(db, 'late', [{ key: 'late-1' }]);
    const logger = recordingLogger();
    const worker = createPullWorker({
      driver: db.newDriver(),
      source: 'late',
      metrics: false,
      logger,
      handler: async (_message, { transaction }) => {
        await transaction(async () => {});
        throw poison();
      },
    });
    const summary = await worker.runOnce();
    const [row] = await readPullRows(db, 'late');
    assert.equal(row!.state, 'processed');
    assert.equal(summary.completed, 1);
    assert.deepEqual(logger.lines, [
      { message: 'pull handler threw after its transaction committed; the message stays processed', error: '{"code":"E_POISON","detail":"bad order"}' },
    ]);
  });
});
