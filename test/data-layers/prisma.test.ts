/**
 * Prisma 7 against the test database: the client is generated first (`prisma generate`, the
 * Rust-free `prisma-client` generator) and runs on `@prisma/adapter-pg`. The Prisma CLI checks for
 * its schema engine at start-up and would download it (binaries.prisma.sh: no access here, and
 * `@prisma/engines`' install script is not approved); `generate` never runs that engine, so
 * `PRISMA_SCHEMA_ENGINE_BINARY` names a stand-in and nothing is downloaded.
 */
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { PrismaPg } from '@prisma/adapter-pg';
import { enqueue, queueboxTransaction, type PrismaTransactionClient } from '../../lib/data-layers/prisma.ts';
import { adapterCases } from './adapter-cases.ts';

/** The generated client, as far as this test uses it. */
interface Transaction extends PrismaTransactionClient {
  $transaction<T>(work: (tx: Transaction) => Promise<T>, options?: { timeout?: number }): Promise<T>;
}
interface Client extends Omit<Transaction, '$connect'> {
  $connect(): Promise<void>;
  $disconnect(): Promise<void>;
}

let prisma: Client;

adapterCases<Transaction>('prisma', {
  async open(test) {
    const schema = resolve('test/data-layers/prisma/schema.prisma');
    execFileSync(process.execPath, [resolve('node_modules/prisma/build/index.js'), 'generate', '--schema', schema], {
      env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/false', PRISMA_HIDE_UPDATE_MESSAGE: '1', CHECKPOINT_DISABLE: '1' },
      stdio: 'pipe',
      timeout: 120_000,
    });
    const generated = resolve('test/data-layers/prisma/generated/client.ts');
    const { PrismaClient } = (await import(generated)) as { PrismaClient: new (options: object) => Client };
    prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: test.url, max: 4 }) });
  },
  close: () => prisma.$disconnect(),
  transaction: (work) => prisma.$transaction(work, { timeout: 20_000 }),
  // An interactive transaction inside one is a savepoint in Prisma 7.
  nested: (tx, work) => tx.$transaction(work),
  outside: () => ({ handle: prisma, what: 'the PrismaClient' }),
  enqueue,
  queueboxTransaction,
});
