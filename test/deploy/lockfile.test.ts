/**
 * package-lock.json's root entry matches package.json: otherwise `npm install` in a fresh clone
 * (the README's first command) rewrites the lockfile and leaves the working tree changed.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';

const KEYS = ['dependencies', 'devDependencies', 'peerDependencies', 'peerDependenciesMeta', 'engines', 'bin'] as const;

describe('package-lock.json', () => {
  it('records package.json\'s dependencies, peers, engines and bin in its root entry', () => {
    const manifest = JSON.parse(readFileSync('package.json', 'utf8')) as Record<string, unknown>;
    const lock = JSON.parse(readFileSync('package-lock.json', 'utf8')) as { packages: Record<string, Record<string, unknown>> };
    const root = lock.packages['']!;
    for (const key of KEYS) assert.deepEqual(root[key], manifest[key], key);
  });
});
