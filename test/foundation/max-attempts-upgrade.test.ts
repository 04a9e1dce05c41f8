/**
 * Migration 8: `max_attempts` used to count retries (5: six deliveries) and now counts deliveries.
 * Rows written before it keep the deliveries they were written for: pending, processing and dead
 * rows get `max_attempts + 1`; sent rows are left alone (docs/upgrading.md).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { pgMigrations } from '../../lib/db/postgres/migrations.ts';
import { mssqlMigrations } from '../../lib/db/sqlserver/migrations.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { schemaAtMigration } from '../helpers/schema-at-migration.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { names as mssqlNames } from '../sqlserver/statement-shapes.ts';

/** The migration that changes what `max_attempts` means. */
const DELIVERIES = 8;

describe('upgrade: max_attempts counts deliveries (migration 8)', { timeout: 60_000 }, () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], claimTimeoutMs: 60_000, pollIntervalMs: 10 },
    });
  });
  after(async () => db.drop());

  it('converts the rows written before it so each keeps its deliveries, and the new rules give them exactly those', async () => {
    const n = db.driver.ctx.names;
    await schemaAtMigration(db, DELIVERIES - 1);
    // Written under the old meaning: max_attempts 5 = six deliveries.
    const insert = async (topic: string, state: string, attempt: number, lease = 'NULL'): Promise<string> =>
      (
        await db.query<{ id: string }>(
          `INSERT INTO ${n.outbox} (topic, payload, state, attempt, max_attempts, claim_token, lease_expires_at, claimed_at)
           VALUES ($1, '{}', $2, $3, 5, ${lease === 'NULL' ? 'NULL' : 'gen_random_uuid()'}, ${lease}, ${lease === 'NULL' ? 'NULL' : 'now()'}) RETURNING id`,
          [topic, state, attempt],
        )
      )[0]!.id;
    const pending = await insert('pending', 'pending', 2);
    const lastLease = await insert('processing', 'processing', 5, `now() - interval '1 second'`);
    const dead = await insert('dead', 'dead', 5);
    const sent = await insert('sent', 'sent', 0);

    const result = await db.newDriver().migrate();
    assert.ok(result.applied.includes(DELIVERIES), `applied ${result.applied.join(', ')}`);
    const maxOf = async () => Object.fromEntries((await inspectRows(db)).map((r) => [r.topic, r.max_attempts]));
    assert.deepEqual(await maxOf(), { pending: 6, processing: 6, dead: 6, sent: 5 });
    assert.deepEqual((await db.newDriver().migrate()).applied, [], 'applied once');
    assert.deepEqual(await maxOf(), { pending: 6, processing: 6, dead: 6, sent: 5 }, 'a second migrate converts nothing again');

    // The pending row had two failed deliveries of six: four more, then dead. The processing row
    // was on its sixth and last delivery when its lease ended: dead at the reclaim.
    const destination = new RecordingDestination({ answer: () => ({ status: 'retryable', error: 'ServiceUnavailable' }) });
    for (let pass = 0; pass < 6; pass++) {
      await db.query(`DELETE FROM ${n.maintenance}`);
      await runOutboxPass(passFixture(db, { destinations: [destination] }));
      await db.query(`UPDATE ${n.outbox} SET scheduled_at = clock_timestamp() WHERE state = 'pending'`);
    }
    assert.deepEqual(destination.offered.map((m) => [m.topic, m.attempt]), [2, 3, 4, 5].map((a) => ['pending', a]));
    const rows = Object.fromEntries((await inspectRows(db, [pending, lastLease, dead, sent])).map((r) => [r.topic, [r.state, r.attempt, r.last_error]]));
    assert.deepEqual(rows, {
      pending: ['dead', 5, 'gave up after 6 of 6 attempts: destination main: ServiceUnavailable'],
      processing: ['dead', 5, 'gave up after 6 of 6 attempts: the lease of the last one expired during the delivery (the call did not finish within its lease)'],
      dead: ['dead', 5, null],
      sent: ['sent', 0, null],
    });
  });

  it('is the same statement on SQL Server', () => {
    const migration = mssqlMigrations.find((m) => m.version === DELIVERIES);
    assert.ok(migration, 'SQL Server has migration 8');
    assert.equal(migration.name, pgMigrations.find((m) => m.version === DELIVERIES)!.name);
    assert.deepEqual(migration.statements(mssqlNames), [`UPDATE ${mssqlNames.outbox} SET max_attempts = max_attempts + 1 WHERE state IN (N'pending', N'processing', N'dead');`]);
  });
});
