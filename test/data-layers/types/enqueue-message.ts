/**
 * Type-checked only (test/data-layers/strict-types.test.ts, and the repository's `tsc`), never
 * run: `enqueue` from `queuebox` and from each `queuebox/<library>` takes an `EnqueueMessage`,
 * which has no `payloadText` or `trace` (QueueBox sets those itself, and `enqueue` refuses them
 * at run time), and the core `enqueue` refuses TypeORM's objects (`queuebox/typeorm` takes them).
 */
import type { Knex } from 'knex';
import type { ControlledTransaction, Transaction as KyselyTransaction } from 'kysely';
import type { EntityManager as MikroOrmEntityManager } from '@mikro-orm/core';
import type postgres from 'postgres';
import type { Transaction as SequelizeTransaction } from 'sequelize';
import type { DataSource, EntityManager } from 'typeorm';
import { enqueue, type EnqueueMessage, type PgTransactionClient } from '../../../lib/index.ts';
import * as knex from '../../../lib/data-layers/knex.ts';
import * as kysely from '../../../lib/data-layers/kysely.ts';
import * as mikroOrm from '../../../lib/data-layers/mikro-orm.ts';
import * as postgresJs from '../../../lib/data-layers/postgres-js.ts';
import * as prisma from '../../../lib/data-layers/prisma.ts';
import * as sequelize from '../../../lib/data-layers/sequelize.ts';
import * as typeorm from '../../../lib/data-layers/typeorm.ts';

const message: EnqueueMessage = { topic: 'order.paid', key: 'o-1', payload: { orderId: 'o-1' }, headers: { h: 'v' }, maxAttempts: 3 };

export async function messages(
  client: PgTransactionClient,
  trx: Knex.Transaction,
  kyselyTrx: KyselyTransaction<Record<string, never>>,
  controlled: ControlledTransaction<Record<string, never>>,
  em: MikroOrmEntityManager,
  sql: postgres.TransactionSql,
  prismaTx: prisma.PrismaTransactionClient,
  t: SequelizeTransaction,
  manager: EntityManager,
): Promise<void> {
  await enqueue(client, message);
  // @ts-expect-error payloadText is QueueBox's (the inbox relay's), not the application's
  await enqueue(client, { topic: 't', payload: {}, payloadText: '{}' });
  // @ts-expect-error trace is captured by enqueue, not given
  await enqueue(client, { topic: 't', payload: {}, trace: null });
  await knex.enqueue(trx, message);
  // @ts-expect-error payloadText
  await knex.enqueue(trx, { topic: 't', payload: {}, payloadText: '{}' });
  await kysely.enqueue(kyselyTrx, message);
  // @ts-expect-error trace
  await kysely.enqueue(controlled, { topic: 't', payload: {}, trace: null });
  await mikroOrm.enqueue(em, message);
  // @ts-expect-error payloadText
  await mikroOrm.enqueue(em, { topic: 't', payload: {}, payloadText: '{}' });
  await postgresJs.enqueue(sql, message);
  // @ts-expect-error trace
  await postgresJs.enqueue(sql, { topic: 't', payload: {}, trace: null });
  await prisma.enqueue(prismaTx, message);
  // @ts-expect-error payloadText
  await prisma.enqueue(prismaTx, { topic: 't', payload: {}, payloadText: '{}' });
  await sequelize.enqueue(t, message);
  // @ts-expect-error trace
  await sequelize.enqueue(t, { topic: 't', payload: {}, trace: null });
  await typeorm.enqueue(manager, message);
  // @ts-expect-error payloadText
  await typeorm.enqueue(manager, { topic: 't', payload: {}, payloadText: '{}' });
}

export async function typeormToCore(dataSource: DataSource, manager: EntityManager): Promise<void> {
  // @ts-expect-error a DataSource is not a pg client: queuebox/typeorm takes it
  await enqueue(dataSource, message);
  // @ts-expect-error dataSource.manager neither
  await enqueue(dataSource.manager, message);
  // @ts-expect-error nor a transaction's manager
  await enqueue(manager, message);
  await enqueue(typeorm.queueboxTransaction(manager), message);
}
