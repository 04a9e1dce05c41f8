/**
 * Each adapter's types against its library's own declarations, as an application compiles them:
 * strict, `nodenext`, `skipLibCheck` off (one `tsc` over the adapter sources). Drizzle is checked
 * apart: drizzle-orm 0.45's declarations do not pass `skipLibCheck: false` on their own (a bare
 * `import { drizzle } from 'drizzle-orm/node-postgres'` reports errors in its gel, mysql,
 * singlestore and sqlite cores), so there only QueueBox's own files must be free of errors.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';

const TSC = resolve('node_modules/typescript/bin/tsc');
const OPTIONS = ['--noEmit', '--strict', '--skipLibCheck', 'false', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--allowImportingTsExtensions', '--types', 'node'];

async function tsc(files: string[]): Promise<{ code: number; errorFiles: string[]; output: string }> {
  const result = await promisify(execFile)(process.execPath, [TSC, ...OPTIONS, ...files], { timeout: 300_000, maxBuffer: 16 * 1024 * 1024 }).then(
    ({ stdout }) => ({ code: 0, stdout }),
    (error: { code?: number; stdout?: string }) => ({ code: error.code ?? 1, stdout: error.stdout ?? '' }),
  );
  const errorFiles = [...new Set([...result.stdout.matchAll(/^([^\s(]+)\(\d+,\d+\): error/gm)].map((m) => m[1]!))];
  return { code: result.code, errorFiles, output: result.stdout };
}

describe('adapter types under strict nodenext with skipLibCheck off', { timeout: 600_000 }, () => {
  it('Kysely, Knex, postgres.js, TypeORM, Prisma, MikroORM and Sequelize: no error anywhere', async () => {
    // With a typed Kysely database in each transaction form, and the message type of each
    // enqueue, `queuebox`'s included (test/data-layers/types/).
    const files = [
      ...['kysely', 'knex', 'postgres-js', 'typeorm', 'prisma', 'mikro-orm', 'sequelize'].map((l) => `lib/data-layers/${l}.ts`),
      'test/data-layers/types/kysely-typed-database.ts',
      'test/data-layers/types/enqueue-message.ts',
    ];
    const { code, output } = await tsc(files);
    assert.equal(code, 0, output);
  });

  it("Drizzle: errors only inside drizzle-orm's own declarations", async () => {
    const { errorFiles, output } = await tsc(['lib/data-layers/drizzle.ts', 'test/data-layers/types/enqueue-message-drizzle.ts']);
    for (const file of errorFiles) assert.match(file, /^node_modules\/drizzle-orm\//, output);
  });
});
