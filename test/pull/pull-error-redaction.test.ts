/**
 * The pull worker's log lines, and the error of `queuebox reclaim`, carry a failure's text redacted
 * as `last_error` is (`redactError`): a driver's message can quote a connection string's password
 * or a secret-named pair. Before, `pull claim failed; polling again`, `pull claim lost at
 * renewal`, `pull message could not be settled`, `pull release failed` and `pull worker loop
 * failed` logged `String(error)`, and `ReclaimIncompleteError`'s message quoted its cause as is.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createPullWorker } from '../../lib/index.ts';
import { ReclaimIncompleteError } from '../../lib/operations/reclaim-now.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { waitUntil } from '../helpers/wait.ts';

const SECRET_ERROR = 'could not connect to postgres://queuebox:hunter2@db.internal:5432/app password=s3cr3t-pw (ECONNREFUSED)';

function assertRedacted(text: string): void {
  assert.ok(!text.includes('hunter2') && !text.includes('s3cr3t-pw'), `a secret is in: ${text}`);
  assert.match(text, /could not connect to postgres:\/\/\*\*\*@db\.internal:5432\/app/);
  assert.match(text, /ECONNREFUSED/);
}

describe('pull worker and reclaim: a failure is logged and thrown redacted', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  it('a claim that fails after the first is logged redacted, and the loop polls on', { timeout: 30_000 }, async () => {
    const driver = db.newDriver();
    let claims = 0;
    const claim = driver.pullClaimMany.bind(driver);
    driver.pullClaimMany = async (params) => {
      claims++;
      if (claims >= 2) throw new Error(SECRET_ERROR);
      return claim(params);
    };
    const lines: Array<{ message: string; attributes: Record<string, unknown> }> = [];
    const logger = {
      warn: (message: string, attributes: Record<string, unknown> = {}) => void lines.push({ message, attributes }),
      error: (message: string, attributes: Record<string, unknown> = {}) => void lines.push({ message, attributes }),
    };
    const worker = createPullWorker({ driver, source: 'redacted', pollMs: 20, logger, handler: async () => {} });
    await worker.start();
    try {
      await waitUntil('two failed claims logged', async () => lines.filter((l) => l.message === 'pull claim failed; polling again').length >= 2);
    } finally {
      await worker.stop();
      await driver.close();
    }
    const failed = lines.filter((l) => l.message === 'pull claim failed; polling again');
    assert.ok(failed.length >= 2);
    for (const line of failed) assertRedacted(String(line.attributes.error));
  });

  it("ReclaimIncompleteError's message quotes its cause redacted; the cause itself is kept", () => {
    const cause = new Error(SECRET_ERROR);
    const error = new ReclaimIncompleteError({ outbox: { reclaimed: 0, dead: 0 }, inbox: { reclaimed: 0, dead: 0 } } as never, cause, ['outbox']);
    assertRedacted(error.message);
    assert.match(error.message, /^reclaim failed: /);
    assert.equal(error.cause, cause);
  });
});
