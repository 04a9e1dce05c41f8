/**
 * An application that bundles a data-layer entry point (`queuebox/kysely` and the rest) for its
 * Lambda gets `enqueue` and its statements, not QueueBox's configuration schema and zod: the
 * schema name check imported one regular expression from the schema module, which pulled in zod
 * (about 500 KB minified of a 560 KB bundle).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const manifest = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { exports: Record<string, { default?: string }>; peerDependencies?: Record<string, string> };

/** The package's data-layer entry points, from its `exports`, as their TypeScript sources. */
const entries = Object.entries(manifest.exports)
  .filter(([, target]) => target.default?.startsWith('./dist/lib/data-layers/') === true)
  .map(([name, target]) => [name, join(REPO, target.default!.replace('./dist/', '').replace(/\.js$/, '.ts'))] as const);

describe('data-layer entry points bundled into an application', () => {
  it('are found in the package exports', () => {
    assert.ok(entries.length >= 8, `data-layer entries: ${entries.map(([name]) => name).join(', ')}`);
  });

  for (const [name, source] of entries) {
    it(`${name} bundles without zod or the configuration schema`, async () => {
      const result = await build({
        entryPoints: [source],
        bundle: true,
        platform: 'node',
        format: 'esm',
        write: false,
        metafile: true,
        logLevel: 'silent',
        // What the application brings itself (the database clients and the libraries wrapped).
        external: ['pg', 'mssql', ...Object.keys(manifest.peerDependencies ?? {})],
      });
      const inputs = Object.keys(result.metafile.inputs);
      assert.deepEqual(
        inputs.filter((path) => path.includes('node_modules/zod/') || path.endsWith('lib/config/schema.ts')),
        [],
        `${name} pulls in the configuration schema`,
      );
      assert.ok(inputs.some((path) => path.endsWith('lib/outbox/enqueue.ts')), 'the bundle holds enqueue');
    });
  }
});
