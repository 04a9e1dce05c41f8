/**
 * The manifest side of the data-layer subpaths: one export per adapter (types and code in
 * `dist/lib/data-layers/`), its library an optional peer whose range starts at the exact version
 * the suite runs (a devDependency), and each subpath importing nothing from its library at load
 * time except types (`queuebox/drizzle` imports `drizzle-orm` only inside the function that runs a
 * statement).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';

/** Subpath → the library package whose version the peer range pins. */
const SUBPATHS: Record<string, string> = {
  kysely: 'kysely',
  drizzle: 'drizzle-orm',
  knex: 'knex',
  'postgres-js': 'postgres',
  typeorm: 'typeorm',
  prisma: '@prisma/client',
  'mikro-orm': '@mikro-orm/core',
  sequelize: 'sequelize',
};

const manifest = JSON.parse(readFileSync('package.json', 'utf8')) as {
  exports: Record<string, { types: string; default: string }>;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  peerDependencies: Record<string, string>;
  peerDependenciesMeta: Record<string, { optional?: boolean }>;
};

describe('the data-layer subpaths in package.json', () => {
  for (const [subpath, library] of Object.entries(SUBPATHS)) {
    it(`queuebox/${subpath}: exported, ${library} an optional peer pinned to the tested version`, () => {
      assert.deepEqual(manifest.exports[`./${subpath}`], { types: `./dist/lib/data-layers/${subpath}.d.ts`, default: `./dist/lib/data-layers/${subpath}.js` });
      const tested = manifest.devDependencies[library];
      assert.match(tested ?? '', /^\d+\.\d+\.\d+$/, `${library} is an exact devDependency`);
      // Every range of the peer is a tested version: the devDependency, or an alias of it
      // (`"postgres-3": "npm:postgres@3.4.9"`) that a test file of its own runs.
      const aliased = Object.values(manifest.devDependencies).flatMap((spec) => (spec.startsWith(`npm:${library}@`) ? [spec.slice(`npm:${library}@`.length)] : []));
      const ranges = manifest.peerDependencies[library]!.split(' || ');
      assert.ok(ranges.includes(`^${tested}`), `${library}: the peer takes ^${tested}`);
      assert.deepEqual(ranges.slice().sort(), [tested!, ...aliased].map((v) => `^${v}`).sort(), `${library}: ${manifest.peerDependencies[library]} is the tested versions`);
      assert.deepEqual(manifest.peerDependenciesMeta[library], { optional: true });
      assert.equal(manifest.dependencies[library], undefined);
    });

    it(`queuebox/${subpath}: imports only types from ${library} at load time`, () => {
      const source = readFileSync(`lib/data-layers/${subpath}.ts`, 'utf8');
      for (const match of source.matchAll(/^import (.*) from '([^.][^']*)';$/gm)) {
        assert.match(match[1]!, /^type /, `${subpath}.ts: import ${match[1]} from '${match[2]}' must be type-only`);
      }
    });
  }
});
