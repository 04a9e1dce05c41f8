import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { dumpSchema, SCHEMA_DUMP_PATH } from '../helpers/schema-dump.ts';

describe('the committed schema dump', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  it('equals the schema the migrations create (run `npm run schema:dump` after adding a migration)', async () => {
    const committed = readFileSync(SCHEMA_DUMP_PATH, 'utf8');
    assert.equal(await dumpSchema(db.pool, db.schema), committed);
  });
});
