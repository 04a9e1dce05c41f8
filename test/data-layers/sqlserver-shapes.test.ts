/**
 * The adapters on SQL Server, shape-tested (no server here): what each sends for `enqueue` and for
 * pull `complete` — the statement, the library's placeholder style, every value bound (none in the
 * text) — through stand-ins of each library's transaction object that record the call. Where the
 * library can say how it writes placeholders on SQL Server (Knex, Kysely, Sequelize), the real
 * library is asked, so the style each adapter uses is the library's own.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import knex from 'knex';
import { Kysely, MssqlDialect, sql, type Transaction as KyselyTransaction } from 'kysely';
import { Sequelize, type Transaction as SequelizeTransaction } from 'sequelize';
import type { EntityManager as TypeormManager } from 'typeorm';
import type { EntityManager as MikroManager } from '@mikro-orm/core';
import { parseConfig } from '../../lib/config/load-config.ts';
import { callerExecutor } from '../../lib/data-layers/caller-executor.ts';
import * as knexAdapter from '../../lib/data-layers/knex.ts';
import * as kyselyAdapter from '../../lib/data-layers/kysely.ts';
import * as mikroAdapter from '../../lib/data-layers/mikro-orm.ts';
import * as prismaAdapter from '../../lib/data-layers/prisma.ts';
import * as sequelizeAdapter from '../../lib/data-layers/sequelize.ts';
import * as typeormAdapter from '../../lib/data-layers/typeorm.ts';
import { SqlServerDriver } from '../../lib/db/sqlserver/sqlserver-driver.ts';
import { UsageError } from '../../lib/errors.ts';
import { enqueue } from '../../lib/outbox/enqueue.ts';
import { createPullClient } from '../../lib/pull/pull-client.ts';
import { loadMssql } from '../../lib/db/sqlserver/mssql-module.ts';

// The SQL Server modules reach `mssql` through mssql(); QueueBox loads it in importOptional, tests here.
await loadMssql();

interface Sent {
  text: string;
  values: unknown[];
}

const ID = '3f0c7a52-5d6e-4b8a-9d1e-2c4b6a8e0f11';
const TOKEN = '9a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d';
const MESSAGE = { id: ID, topic: 'order.paid.secret-topic', key: 'o-1', payload: { orderId: 'o-1' }, headers: { h: 'v' }, maxAttempts: 7 };
const url = 'Server=127.0.0.1,1;Database=shape;User Id=sa;Password=x;Encrypt=false';
const driver = new SqlServerDriver({ config: parseConfig({ database: { type: 'sqlserver', url, connectTimeoutMs: 1000 } }), url });
const pull = createPullClient(driver);
const knexMssql = knex({ client: 'mssql' });
const sequelizeMssql = new Sequelize({ dialect: 'mssql', logging: false });
class NoPool {
  destroy() {}
}
const kyselyMssql = new Kysely<Record<string, never>>({ dialect: new MssqlDialect({ tarn: { Pool: NoPool, options: {} } as never, tedious: {} as never }) });

/** One recording: the statement text sent and its values; answers like SQL Server's `OUTPUT`. */
function recorder() {
  const sent: Sent[] = [];
  const answer = (text: string) => (text.includes('OUTPUT') ? [{ id: ID }] : []);
  return { sent, answer };
}

/** The library stand-ins on SQL Server: the adapter, a recorder, the placeholders the library itself writes. */
const LIBRARIES = {
  knex: () => {
    const r = recorder();
    const trx = { isTransaction: true, isCompleted: () => false, client: knexMssql.client, raw: async (text: string, values: unknown[]) => (r.sent.push({ text, values }), r.answer(text)) };
    return { r, wrap: () => knexAdapter.queueboxTransaction(trx as never), enqueue: () => knexAdapter.enqueue(trx as never, MESSAGE), placeholder: /\?/ };
  },
  kysely: () => {
    const r = recorder();
    const trx = { isTransaction: true, getExecutor: () => kyselyMssql.getExecutor(), executeQuery: async (q: { sql: string; parameters: unknown[] }) => (r.sent.push({ text: q.sql, values: [...q.parameters] }), { rows: r.answer(q.sql) }) };
    return { r, wrap: () => kyselyAdapter.queueboxTransaction(trx as unknown as KyselyTransaction<never>), enqueue: () => kyselyAdapter.enqueue(trx as unknown as KyselyTransaction<never>, MESSAGE), placeholder: /@1\b/ };
  },
  sequelize: () => {
    const r = recorder();
    const stub = { getDialect: () => sequelizeMssql.getDialect(), query: async (text: string, options: { bind: unknown[] }) => (r.sent.push({ text, values: options.bind }), [r.answer(text), null]) };
    const t = { sequelize: stub, commit: async () => {}, rollback: async () => {} } as unknown as SequelizeTransaction;
    return { r, wrap: () => sequelizeAdapter.queueboxTransaction(t), enqueue: () => sequelizeAdapter.enqueue(t, MESSAGE), placeholder: /\$1\b/ };
  },
  typeorm: () => {
    const r = recorder();
    const queryRunner = { isTransactionActive: true, query: async (text: string, values: unknown[]) => (r.sent.push({ text, values }), { records: r.answer(text), raw: undefined }) };
    const manager = { dataSource: { options: { type: 'mssql' } }, queryRunner } as unknown as TypeormManager;
    return { r, wrap: () => typeormAdapter.queueboxTransaction(manager), enqueue: () => typeormAdapter.enqueue(manager, MESSAGE), placeholder: /@0\b/ };
  },
  prisma: () => {
    const r = recorder();
    const tx = { _activeProvider: 'sqlserver', $queryRawUnsafe: async (text: string, ...values: unknown[]) => (r.sent.push({ text, values }), r.answer(text)) };
    return { r, wrap: () => prismaAdapter.queueboxTransaction(tx), enqueue: () => prismaAdapter.enqueue(tx, MESSAGE), placeholder: /@P1\b/ };
  },
  'mikro-orm': () => {
    const r = recorder();
    const context = { getExecutor: () => kyselyMssql.getExecutor(), executeQuery: async (q: { sql: string; parameters: unknown[] }) => (r.sent.push({ text: q.sql, values: [...q.parameters] }), { rows: r.answer(q.sql) }) };
    const em = { isInTransaction: () => true, getTransactionContext: () => context } as unknown as MikroManager;
    return { r, wrap: () => mikroAdapter.queueboxTransaction(em), enqueue: () => mikroAdapter.enqueue(em, MESSAGE), placeholder: /@1\b/ };
  },
};

describe('the adapters on SQL Server (shape)', () => {
  after(async () => {
    await knexMssql.destroy();
    await sequelizeMssql.close();
    await driver.close();
  });

  it('writes placeholders the way each library does on SQL Server (asked of the library itself)', async () => {
    assert.equal(knexMssql.raw('select ?, ?', [1, 2]).toSQL().toNative().sql, 'select @p0, @p1', 'Knex turns ? into @p0 for SQL Server');
    assert.equal(sql`select ${1}, ${2}`.compile(kyselyMssql).sql, 'select @1, @2', 'Kysely numbers from @1 on SQL Server');
    const [formatted] = (sequelizeMssql as unknown as { dialect: { Query: { formatBindParameters(s: string, v: unknown[], d: string): [string] } } }).dialect.Query.formatBindParameters('select $1, $2', [1, 2], 'mssql');
    assert.equal(formatted, 'select @0, @1', 'Sequelize turns $1 binds into @0 for SQL Server');
  });

  for (const [library, make] of Object.entries(LIBRARIES)) {
    it(`${library}: enqueue sends one bound INSERT into [dbo].[outbox] (OUTPUT … INTO a table variable) in the library's placeholder style`, async () => {
      const { r, enqueue: run, placeholder } = make();
      assert.equal(await run(), ID);
      assert.equal(r.sent.length, 1, 'no probe: the library says it is in a transaction');
      const [{ text, values }] = r.sent as [Sent];
      assert.match(text, /^DECLARE @v_inserted TABLE \(id NVARCHAR\(36\) NOT NULL\);\nINSERT INTO \[dbo\]\.\[outbox\] \(id, topic, \[key\], payload, headers, max_attempts, scheduled_at, trace_context\)/);
      assert.match(text, /OUTPUT LOWER\(CONVERT\(NVARCHAR\(36\), inserted\.id\)\) INTO @v_inserted \(id\)/, 'OUTPUT … INTO: a trigger on the table does not make it fail');
      assert.match(text, placeholder);
      assert.doesNotMatch(text, /secret-topic|o-1|orderId/, 'no value in the text');
      assert.ok(values.includes('order.paid.secret-topic') && values.includes('{"orderId":"o-1"}') && values.includes(7), JSON.stringify(values));
    });

    it(`${library}: enqueue binds the Lambda invocation's X-Ray trace header as the row's trace context`, async () => {
      const header = 'Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1';
      const previous = process.env._X_AMZN_TRACE_ID;
      process.env._X_AMZN_TRACE_ID = header;
      try {
        const { r, enqueue: run } = make();
        await run();
        const [{ values }] = r.sent as [Sent];
        assert.equal(values.at(-1), JSON.stringify({ awsTraceHeader: header }));
      } finally {
        if (previous === undefined) delete process.env._X_AMZN_TRACE_ID;
        else process.env._X_AMZN_TRACE_ID = previous;
      }
    });

    it(`${library}: pull complete sends the fenced UPDATE … OUTPUT … INTO through the library's transaction`, async () => {
      const { r, wrap, placeholder } = make();
      assert.deepEqual(await pull.complete(wrap(), { id: ID, token: TOKEN }), { ok: true });
      const [{ text, values }] = r.sent as [Sent];
      assert.match(text, /^DECLARE @v_changed TABLE \(id UNIQUEIDENTIFIER NOT NULL\);\nUPDATE r SET state = N'processed'/);
      assert.match(text, /OUTPUT inserted\.id INTO @v_changed \(id\)/);
      assert.match(text, /\nSELECT id FROM @v_changed;$/);
      assert.match(text, /r\.consumption = N'pull' AND r\.state = N'processing'/);
      assert.match(text, placeholder);
      assert.deepEqual(new Set(values), new Set([ID, TOKEN]));
    });
  }

  it('asks the server for @@TRANCOUNT when a library cannot tell, and refuses at depth 0', async () => {
    const sent: string[] = [];
    const executor = (depth: number) =>
      callerExecutor({
        library: 'Example',
        hint: 'example.transaction()',
        dialect: 'sqlserver',
        style: 'at-p',
        inTransaction: () => undefined,
        run: async (text) => (sent.push(text), { rows: text.includes('@@TRANCOUNT') ? [{ depth }] : [{ id: ID }], rowCount: 1 }),
      });
    await assert.rejects(enqueue(executor(0), MESSAGE), (e: unknown) => e instanceof UsageError && /outside a transaction/.test(e.message));
    assert.deepEqual(sent, ['SELECT @@TRANCOUNT AS depth'], 'nothing written');
    assert.equal(await enqueue(executor(1), MESSAGE), ID);
    assert.equal(sent.length, 3);
  });
});
