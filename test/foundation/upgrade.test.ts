/**
 * Upgrading a live database: the schema of the first release, rows in flight (pending, processing
 * under a live lease held by a poller of that release, scheduled for a retry) while `migrate`
 * brings the schema to the current level, then passes of the current release. Nothing is lost, no
 * key is delivered out of order, the held claims stay fenced and settle with their tokens, and
 * `migrate --check` is clean afterwards (docs/upgrading.md).
 *
 * The rows and claims of 0.1.0 are written with the statements of 0.1.0 (its INSERT and its claim
 * UPDATE; the settles are the same fenced UPDATEs in every release): the current release reads
 * columns that later migrations add (`trace_context`, migration 7), so it runs only after
 * `migrate`, as the procedure says.
 *
 * 0.1.0 — the CHANGELOG's first release, commit b8f312e — shipped PostgreSQL migrations 1 to 4
 * and no claim functions. The test builds exactly that level by applying the migrations up to
 * `RELEASED_0_1_0` (a released migration is never edited), so it stays an upgrade across every
 * migration added since, including the ones added after this test was written.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import type { ClaimRef } from '../../lib/db/driver.ts';
import { pgMigrationScript } from '../../lib/db/postgres/migration-script.ts';
import { pgMigrations } from '../../lib/db/postgres/migrations.ts';
import { runOutboxPass } from '../../lib/outbox/outbox-pass.ts';
import { schemaAtMigration } from '../helpers/schema-at-migration.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { claimRecordingDriver, inspectRows, passFixture } from '../helpers/outbox-pass-fixture.ts';
import { RecordingDestination } from '../helpers/recording-destination.ts';
import { delay } from '../helpers/wait.ts';
import { claimSet } from '../../lib/db/postgres/fenced-writes.ts';

/** The last PostgreSQL migration of 0.1.0. */
const RELEASED_0_1_0 = 4;

describe('upgrade from the 0.1.0 schema with rows in flight (PostgreSQL)', { timeout: 120_000 }, () => {
  it('migrate to the current level under the old poller\'s live claims, then passes of this release: nothing lost, order per key kept, held leases fenced, --check clean', async () => {
    assert.ok(pgMigrations.some((m) => m.version > RELEASED_0_1_0), 'there is something to upgrade to');
    const db = await createTestDatabase({
      destinations: { main: { type: 'sqs', queueUrl: 'http://localhost:1/000000000000/main' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'main' }], claimTimeoutMs: 60_000, pollIntervalMs: 10, batchSize: 10 },
    });
    try {
      // The 0.1.0 schema, as 0.1.0's migrate left it.
      const n = db.driver.ctx.names;
      await schemaAtMigration(db, RELEASED_0_1_0);

      // 12 keys × 8 rows, interleaved, and 24 keyless rows, written by 0.1.0's INSERT in one transaction.
      const messages = [
        ...Array.from({ length: 96 }, (_, i) => ({ topic: 'orders', key: `k${i % 12}`, payload: { i } })),
        ...Array.from({ length: 24 }, (_, i) => ({ topic: 'audit', key: null, payload: { i } })),
      ];
      const [inserted] = await db.query<{ ids: string[] }>(
        `WITH m AS (SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[]) WITH ORDINALITY AS m(topic, key, payload, ord)),
              ins AS (INSERT INTO ${n.outbox} (topic, key, payload) SELECT topic, key, payload FROM m ORDER BY ord RETURNING id::text, sequence)
         SELECT array_agg(id ORDER BY sequence) AS ids FROM ins`,
        [messages.map((m) => m.topic), messages.map((m) => m.key), messages.map((m) => JSON.stringify(m.payload))],
      );
      const ids = inserted!.ids;
      assert.equal(ids.length, messages.length);
      // A poller of 0.1.0 holds 10 rows under a live lease (the heads of k0…k9), and has scheduled
      // 2 more for a retry (the heads of k10 and k11; their keys wait behind them).
      const claimAs010 = async (rowIds: string[]) =>
        db.query<{ id: string; key: string | null; claim_token: string }>(
          `UPDATE ${n.outbox} o SET ${claimSet('$1')} WHERE o.id = ANY($2::uuid[]) AND o.state = 'pending' RETURNING o.id::text, o.key, o.claim_token::text`,
          [60_000, rowIds],
        );
      const old = db.newDriver();
      const held = (await claimAs010(ids.slice(0, 10))).map((r) => ({ id: r.id, key: r.key, claimToken: r.claim_token }));
      assert.equal(held.length, 10);
      const retried = await claimAs010(ids.slice(10, 12));
      assert.equal(retried.length, 2);
      assert.equal((await old.outboxRetryMany({ items: retried.map((r) => ({ id: r.id, token: r.claim_token, delayMs: 1_500, error: 'throttled' })) })).length, retried.length);
      const heldClaims: ClaimRef[] = held.map((r) => ({ id: r.id, token: r.claimToken }));

      const behind = await db.driver.migrateCheck();
      assert.ok(behind.some((line) => /^migration 6 \(.*\) is not applied$/.test(line)), behind.join('\n'));
      assert.ok(behind.some((line) => /^migration 7 \(trace context of a row\) is not applied$/.test(line)), behind.join('\n'));
      assert.equal(behind.filter((line) => /^claim function .* is missing/.test(line)).length, 2, behind.join('\n'));

      // The migration runs while the old poller's claims are live; then a pass of this release.
      const destination = new RecordingDestination({ delayMs: 2 });
      const claims = { ids: new Map<string, string>(), keys: new Map<string, string>(), violations: [] as string[] };
      for (const row of held) {
        claims.ids.set(row.id, 'old');
        if (row.key !== null) claims.keys.set(row.key, row.id);
      }
      const passDriver = claimRecordingDriver(db.newDriver(), 'pass', claims);
      const result = await db.newDriver().migrate();
      const pass = runOutboxPass(passFixture(db, { destinations: [destination], driver: passDriver, mode: 'drain' }));
      assert.deepEqual(result.applied, pgMigrations.filter((m) => m.version > RELEASED_0_1_0).map((m) => m.version));
      assert.equal(result.claimFunctions?.created.length, 2);
      await pass;

      // The held claims outlived the upgrade: their fence still holds, and a wrong token changes nothing.
      assert.deepEqual(await old.outboxMarkSentMany({ claims: [{ id: held[0]!.id, token: randomUUID() }] }), []);
      const settledAt = destination.deliveries.length;
      assert.deepEqual((await old.outboxMarkSentMany({ claims: heldClaims })).sort(), heldClaims.map((c) => c.id).sort());
      for (const row of held) {
        claims.ids.delete(row.id);
        if (row.key !== null) claims.keys.delete(row.key);
      }

      // Later passes deliver the rest, the retries once due.
      for (let round = 0; round < 50 && (await inspectRows(db)).some((r) => r.state !== 'sent'); round++) {
        await runOutboxPass(passFixture(db, { destinations: [destination], driver: passDriver, mode: 'drain' }));
        await delay(100);
      }

      const rows = await inspectRows(db);
      assert.deepEqual(rows.filter((r) => r.state !== 'sent').map((r) => `${r.id} ${r.state}`), [], 'every row sent');
      const heldIds = new Set(held.map((r) => r.id));
      const published = destination.deliveries.map((d) => d.id);
      assert.equal(new Set(published).size, published.length, 'no row published twice');
      assert.deepEqual([...new Set([...published, ...heldIds])].sort(), [...ids].sort(), 'nothing lost');
      assert.ok(!published.some((id) => heldIds.has(id)), 'no pass took a row under the old poller\'s live lease');
      assert.deepEqual(claims.violations, []);
      assert.deepEqual(destination.overlaps, []);
      // Order per key across the upgrade: the pass's deliveries, the held rows where they settled, the rest.
      const sequence = new Map(rows.map((r) => [r.id, BigInt(r.sequence)]));
      const key = new Map(rows.map((r) => [r.id, r.key]));
      const order = [...published.slice(0, settledAt), ...held.map((r) => r.id), ...published.slice(settledAt)];
      const last = new Map<string, bigint>();
      for (const id of order) {
        const k = key.get(id);
        if (k === null || k === undefined) continue;
        assert.ok((last.get(k) ?? -1n) < sequence.get(id)!, `key ${k}: row ${id} delivered after a later row`);
        last.set(k, sequence.get(id)!);
      }
      assert.deepEqual(await db.driver.migrateCheck(), []);
      // The script of this release agrees too: applied on top, it changes nothing --check would see.
      await db.query(pgMigrationScript(n, db.driver.claimStatements()));
      assert.deepEqual(await db.driver.migrateCheck(), []);
    } finally {
      await db.drop();
    }
  });
});
