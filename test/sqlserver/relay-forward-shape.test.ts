/**
 * The SQL Server relay forward keeps an aggregate's outbox key across a change of
 * `inbox.relay.outboxKey` (the upgrade to source-scoped keys included), as on PostgreSQL: while an
 * open outbox row relayed from the same source has the key of the other form, the forward writes
 * the row with that key. Checked without a server: the lookup's text and a stand-in pool's
 * transaction, which records what the forward sends.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import sql from 'mssql';
import type { InboxForwardItem } from '../../lib/db/driver.ts';
import { buildOpenRelayedKeyProbe, inboxForward } from '../../lib/db/sqlserver/inbox-queries.ts';
import { forwardItemOf } from '../../lib/inbox/relay-pass.ts';
import { names, SENTINELS } from './statement-shapes.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

interface Sent {
  text: string;
  inputs: Record<string, unknown>;
}

/** A pool whose transaction answers each query with the next recordset and records texts and inputs. */
function standInPool(answers: unknown[][]): { pool: sql.ConnectionPool; sent: Sent[]; committed: () => boolean } {
  const sent: Sent[] = [];
  let committed = false;
  const tx = {
    async begin() {},
    async commit() {
      committed = true;
    },
    async rollback() {},
    request() {
      const inputs: Record<string, unknown> = {};
      return {
        input(name: string, _type: unknown, value: unknown) {
          inputs[name] = value;
        },
        async query(text: string) {
          sent.push({ text, inputs });
          const recordset = answers.shift();
          if (recordset === undefined) throw new Error('no answer left');
          return { recordset, recordsets: [recordset], rowsAffected: [] };
        },
      };
    },
  };
  const pool = Object.assign(Object.create(sql.ConnectionPool.prototype) as sql.ConnectionPool, { transaction: () => tx });
  return { pool, sent, committed: () => committed };
}

const ID = '11111111-2222-4333-8444-555555555555';
const TOKEN = '66666666-7777-4888-8999-aaaaaaaaaaaa';
const scoped: InboxForwardItem = {
  id: ID,
  token: TOKEN,
  outbox: { topic: 'orders', key: 'shop:order-7', payload: {}, headers: { 'x-source': 'shop' } },
  keyWhileOpen: { key: 'order-7', source: 'shop' },
};
const insertOf = (sent: Sent[]) => sent.find((s) => /INSERT INTO \[dbo\]\.\[outbox\]/.test(s.text))!;

describe('SQL Server relay forward: the outbox key while an open row has the other form (shape)', () => {
  it('looks for an open row relayed from the source with the other key: exact key and x-source (binary, byte lengths), pending or processing, committed rows under locking reads', () => {
    const { text, params } = buildOpenRelayedKeyProbe(names, { key: SENTINELS.key, source: SENTINELS.source });
    assert.equal(
      text,
      `SELECT TOP (1) 1 AS held FROM [dbo].[outbox] WITH (READCOMMITTEDLOCK)
 WHERE [key] = @p_key AND [key] IS NOT NULL AND DATALENGTH([key]) = DATALENGTH(@p_key)
   AND state IN (N'pending', N'processing')
   AND JSON_VALUE(headers, '$."x-source"') COLLATE Latin1_General_100_BIN2 = @p_source AND DATALENGTH(JSON_VALUE(headers, '$."x-source"')) = DATALENGTH(@p_source);`,
    );
    assert.deepEqual(params.map((p) => [p.name, p.value]), [['p_key', SENTINELS.key], ['p_source', SENTINELS.source]]);
  });

  it('writes the other form\'s key when the lookup finds an open row, in the same transaction as the insert and the fenced mark', async () => {
    const { pool, sent, committed } = standInPool([[{ held: 1 }], [], [{ id: ID }]]);
    assert.equal(await inboxForward(pool, names, scoped, { maxAttempts: 5 }), true);
    assert.equal(sent.length, 3);
    assert.match(sent[0]!.text, /SELECT TOP \(1\) 1 AS held FROM \[dbo\]\.\[outbox\] WITH \(READCOMMITTEDLOCK\)/);
    assert.deepEqual([sent[0]!.inputs.p_key, sent[0]!.inputs.p_source], ['order-7', 'shop']);
    assert.equal(insertOf(sent).inputs.p_key, 'order-7', 'behind the open row, under its key');
    assert.match(sent[2]!.text, /state = N'processed'/);
    assert.ok(committed());
  });

  it('writes the configured key when no open row has the other form', async () => {
    const { pool, sent } = standInPool([[], [], [{ id: ID }]]);
    assert.equal(await inboxForward(pool, names, scoped, { maxAttempts: 5 }), true);
    assert.equal(insertOf(sent).inputs.p_key, 'shop:order-7');
  });

  it('does not look when the item has no other form (no aggregate), and the relay gives SQL Server the other form as it gives PostgreSQL', async () => {
    const { pool, sent } = standInPool([[], [{ id: ID }]]);
    const { keyWhileOpen: _, ...plain } = scoped;
    assert.equal(await inboxForward(pool, names, plain, { maxAttempts: 5 }), true);
    assert.equal(sent.length, 2, 'the insert and the fenced mark only');
    const row = { id: ID, claimToken: TOKEN, source: 'shop', aggregateId: 'order-7' } as Parameters<typeof forwardItemOf>[0];
    assert.deepEqual(forwardItemOf(row, scoped.outbox, 'source-and-aggregate').keyWhileOpen, { key: 'order-7', source: 'shop' });
  });

  it('writes an outbox key of spaces only (an aggregate id of spaces only, outboxKey: aggregate) as no key: the inbox claimed the row as one without aggregate, and enqueue refuses such a key', async () => {
    const blank: InboxForwardItem = { id: ID, token: TOKEN, outbox: { topic: 'orders', key: '  ', payload: {}, headers: { 'x-source': 'shop' } }, keyWhileOpen: { key: 'shop:  ', source: 'shop' } };
    const { pool, sent, committed } = standInPool([[], [], [{ id: ID }]]);
    assert.equal(await inboxForward(pool, names, blank, { maxAttempts: 5 }), true);
    assert.equal(insertOf(sent).inputs.p_key, null);
    assert.ok(committed());
    // the other form's key, when an open row relayed by an earlier version still has it
    const other = standInPool([[{ held: 1 }], [], [{ id: ID }]]);
    assert.equal(await inboxForward(other.pool, names, { ...blank, outbox: { ...blank.outbox, key: 'shop: ' }, keyWhileOpen: { key: ' ', source: 'shop' } }, { maxAttempts: 5 }), true);
    assert.equal(insertOf(other.sent).inputs.p_key, null);
    // a key with other characters is kept as it is, trailing spaces included
    const kept = standInPool([[], [], [{ id: ID }]]);
    assert.equal(await inboxForward(kept.pool, names, { ...blank, outbox: { ...blank.outbox, key: 'shop: ' } }, { maxAttempts: 5 }), true);
    assert.equal(insertOf(kept.sent).inputs.p_key, 'shop: ');
  });

  it('a lost claim rolls the transaction back: no outbox row survives, whatever key it took', async () => {
    const { pool, committed } = standInPool([[{ held: 1 }], [], []]);
    assert.equal(await inboxForward(pool, names, scoped, { maxAttempts: 5 }), false);
    assert.equal(committed(), false);
  });
});
