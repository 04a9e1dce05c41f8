/**
 * SQL Server keeps payload numbers digit for digit without a server: the inbox and outbox inserts
 * bind the payload text as given (not `JSON.stringify` of the parsed object), and a returned
 * inbox row carries the NVARCHAR text as `payloadText`. (The claims against a live server are in
 * the conformance suite.)
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildInboxInsert } from '../../lib/db/sqlserver/inbox-queries.ts';
import { toInboxRow } from '../../lib/db/sqlserver/inbox-rows.ts';
import { buildOutboxInsert } from '../../lib/db/sqlserver/outbox-queries.ts';
import { names } from './statement-shapes.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

const TEXT = '{"id":"e-1","amount":12345678901234567890123,"ratio":0.1000000000000000055511151231257827}';
const parsed = JSON.parse(TEXT) as Record<string, unknown>;
const bound = (params: Array<{ name: string; value: unknown }>) => params.find((p) => p.name === 'p_payload')?.value;

describe('SQL Server payload text', () => {
  it('inboxInsert binds the payload text as sent; without it, the stringified payload', () => {
    const id = '6f9619ff-8b86-4011-b42d-00c04fd430c8';
    assert.equal(bound(buildInboxInsert(names, { source: 's', idempotencyKey: 'k', consumption: 'push', payload: parsed, payloadText: TEXT }, id).params), TEXT);
    assert.equal(bound(buildInboxInsert(names, { source: 's', idempotencyKey: 'k', consumption: 'push', payload: { n: 1 } }, id).params), '{"n":1}');
  });

  it('outboxInsert binds payloadText when the message has it (the relay), else the stringified payload', () => {
    assert.equal(bound(buildOutboxInsert(names, { topic: 't', payload: parsed, payloadText: TEXT }, { maxAttempts: 5 }).statement.params), TEXT);
    assert.equal(bound(buildOutboxInsert(names, { topic: 't', payload: { n: 1 } }, { maxAttempts: 5 }).statement.params), '{"n":1}');
  });

  it('a returned inbox row carries the stored text as payloadText next to the parsed payload', () => {
    const row = toInboxRow({
      id: '6F9619FF-8B86-4011-B42D-00C04FD430C8',
      source: 's',
      idempotency_key: 'k',
      aggregate_id: null,
      event_type: null,
      payload: TEXT,
      headers: '{}',
      correlation_id: null,
      attempt: 0,
      sequence: '1',
      created_at: new Date(),
      claim_token: '7F9619FF-8B86-4011-B42D-00C04FD430C8',
      lease_expires_at: new Date(),
    });
    assert.equal(row.payloadText, TEXT);
    assert.equal((row.payload as { id: string }).id, 'e-1');
  });
});
