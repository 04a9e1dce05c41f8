/**
 * Prisma 7 against the test database: the client is generated first (`prisma generate`, the
 * Rust-free `prisma-client` generator; see `prisma-client.ts`) and runs on `@prisma/adapter-pg`.
 */
import { PrismaPg } from '@prisma/adapter-pg';
import { enqueue, queueboxTransaction, type PrismaTransactionClient } from '../../lib/data-layers/prisma.ts';
import { adapterCases } from './adapter-cases.ts';
import { generatePrismaClient, type GeneratedPrismaClient } from './prisma-client.ts';

/** The generated client, as far as this test uses it. */
interface Transaction extends PrismaTransactionClient {
  $transaction<T>(work: (tx: Transaction) => Promise<T>, options?: { timeout?: number }): Promise<T>;
}
interface Client extends Omit<Transaction, '$connect'> {
  $connect(): Promise<void>;
  $disconnect(): Promise<void>;
}

let prisma: Client;
let generated: GeneratedPrismaClient;

adapterCases<Transaction>('prisma', {
  async open(test) {
    generated = await generatePrismaClient();
    const { PrismaClient } = (await import(generated.module)) as { PrismaClient: new (options: object) => Client };
    prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: test.url, max: 4 }) });
  },
  async close() {
    await prisma.$disconnect();
    generated.remove();
  },
  transaction: (work) => prisma.$transaction(work, { timeout: 20_000 }),
  // An interactive transaction inside one is a savepoint in Prisma 7.
  nested: (tx, work) => tx.$transaction(work),
  outside: () => ({ handle: prisma, what: 'the PrismaClient' }),
  enqueue,
  queueboxTransaction,
});
