/**
 * package.json's `typesVersions` against its `exports`: TypeScript's `node10` resolution (still
 * the default of `"module": "commonjs"`) reads `types` for the root and `typesVersions` for a
 * subpath, never `exports`. The two maps must name the same subpaths, in the same order, with the
 * same declaration files; each of those is compiled from a source file that exists. No build
 * needed (test/deploy/packed-data-layers.test.ts type-checks the packed package under `node10`).
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';

interface Manifest {
  types: string;
  exports: Record<string, { types?: string; default: string }>;
  typesVersions?: Record<string, Record<string, string[]>>;
}

const manifest = JSON.parse(readFileSync('package.json', 'utf8')) as Manifest;
/** `exports` entries that have types: [subpath without "./", declaration file]. */
const typedSubpaths = Object.entries(manifest.exports)
  .filter(([key, entry]) => key !== '.' && entry.types !== undefined)
  .map(([key, entry]) => [key.replace(/^\.\//, ''), entry.types!] as const);

describe('package.json typesVersions (node10 resolution of the subpaths)', () => {
  it('maps every TypeScript version ("*") and nothing else', () => {
    assert.ok(manifest.typesVersions, 'package.json has typesVersions');
    assert.deepEqual(Object.keys(manifest.typesVersions), ['*']);
  });

  it('covers exactly the typed subpaths of exports, in the same order, each to the same .d.ts file', () => {
    assert.ok(typedSubpaths.length > 0, 'exports has typed subpaths');
    const mapped = Object.entries(manifest.typesVersions?.['*'] ?? {});
    assert.deepEqual(
      mapped,
      typedSubpaths.map(([subpath, types]) => [subpath, [types]]),
    );
  });

  it('the root: `types` is the declaration file of exports["."]', () => {
    assert.equal(manifest.types, manifest.exports['.']?.types);
  });

  it('every declaration file is compiled from a source file of lib/', () => {
    for (const types of [manifest.types, ...typedSubpaths.map(([, t]) => t)]) {
      assert.match(types, /^\.\/dist\/lib\/.+\.d\.ts$/, types);
      const source = types.replace(/^\.\/dist\//, '').replace(/\.d\.ts$/, '.ts');
      assert.ok(existsSync(source), `${types} comes from ${source}`);
    }
  });
});
