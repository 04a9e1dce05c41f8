/**
 * Generates a Prisma client for a test (`test/data-layers/prisma/schema.prisma`, no models) into a
 * directory of its own under `test/data-layers/prisma/generated/` (not committed), so test files
 * running at once do not write over each other. The Prisma CLI looks for its schema engine at
 * start-up and would download it (no access to binaries.prisma.sh here; `@prisma/engines`' install
 * script is not approved); `generate` with the `prisma-client` generator never runs it, so
 * `PRISMA_SCHEMA_ENGINE_BINARY` names a stand-in and nothing is downloaded.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

/** A generated client: its entry module, and `remove` to delete it. */
export interface GeneratedPrismaClient {
  module: string;
  remove(): void;
}

/** Runs `prisma generate` (about a second) into a fresh directory. */
export async function generatePrismaClient(): Promise<GeneratedPrismaClient> {
  const dir = resolve('test/data-layers/prisma/generated', `${process.pid}-${randomBytes(3).toString('hex')}`);
  mkdirSync(dir, { recursive: true });
  const schema = join(dir, 'schema.prisma');
  writeFileSync(schema, readFileSync('test/data-layers/prisma/schema.prisma', 'utf8').replace('output   = "./generated"', 'output   = "./client"'));
  await promisify(execFile)(process.execPath, [resolve('node_modules/prisma/build/index.js'), 'generate', '--schema', schema], {
    env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/false', PRISMA_HIDE_UPDATE_MESSAGE: '1', CHECKPOINT_DISABLE: '1' },
    timeout: 120_000,
  });
  return { module: join(dir, 'client', 'client.ts'), remove: () => rmSync(dir, { recursive: true, force: true }) };
}
