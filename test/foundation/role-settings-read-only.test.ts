/**
 * A role or database whose transactions are read-only by default (`default_transaction_read_only
 * = on`), or a URL that names a standby: every write QueueBox sends is refused (SQLSTATE 25006).
 * The error says where to look — the setting, or the standby — not only which statement failed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { QueueBoxError } from '../../lib/errors.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { insertOutboxRows } from '../helpers/outbox-pass-fixture.ts';
import { createRoleWith, driverAsRole, type TestRole } from './role-settings-fixtures.ts';

describe('a role whose transactions are read-only by default (PostgreSQL)', () => {
  let db: TestDatabase;
  let role: TestRole;
  let driver: PostgresDriver;
  before(async () => {
    db = await createTestDatabase();
    role = await createRoleWith(db, { default_transaction_read_only: 'on' });
    driver = driverAsRole(db, role);
  });
  after(async () => {
    await driver?.close();
    await role?.drop();
    await db?.drop();
  });

  const readOnly = (e: unknown) =>
    e instanceof QueueBoxError &&
    /read-only transaction: QueueBox writes, and this connection's transactions are read-only/.test(e.message) &&
    /default_transaction_read_only = off/.test(e.message) &&
    /standby/.test(e.message);

  it('a claim, a fenced write and migrate are refused with an error that names the setting and the standby', async () => {
    await insertOutboxRows(db, [{ topic: 't', key: 'k', payload: {} }]);
    await assert.rejects(driver.outboxClaimMany({ limit: 10, leaseMs: 30_000 }), readOnly);
    await assert.rejects(driver.outboxMarkSentMany({ claims: [{ id: '00000000-0000-4000-8000-000000000000', token: '00000000-0000-4000-8000-000000000000' }] }), readOnly);
    await assert.rejects(driver.migrate(), readOnly);
    const [row] = await db.query<{ state: string }>(`SELECT state FROM "${db.schema}".outbox`);
    assert.equal(row!.state, 'pending', 'nothing was written');
  });
});
