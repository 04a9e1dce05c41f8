import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import * as api from '../../lib/index.ts';
import { OPTIONAL_PACKAGES } from '../../lib/optional-package.ts';

const docs = ['README.md', ...readdirSync('docs').filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
const index = readFileSync('lib/index.ts', 'utf8');

/** Whether `lib/index.ts` exports `name` (a value, or a type that exists only at compile time). */
const exported = (name: string) => name in api || new RegExp(`\\btype ${name}\\b|export type \\{[^}]*\\b${name}\\b`).test(index);

describe('the public API', () => {
  it("exports every name the docs import from 'queuebox'", () => {
    const names = new Set<string>();
    for (const file of docs) {
      for (const match of readFileSync(file, 'utf8').matchAll(/import \{([^}]*)\} from 'queuebox'/g)) {
        for (const part of match[1]!.split(',')) names.add(part.trim().replace(/^type\s+/, ''));
      }
    }
    assert.ok(names.has('enqueue') && names.has('createPullWorker'), [...names].join(', '));
    for (const name of names) assert.ok(exported(name), `${name} is exported`);
  });

  it('exports what docs/pull-workers.md tells applications to pass: a Deadline and QueueBoxMetrics', () => {
    const page = readFileSync('docs/pull-workers.md', 'utf8');
    for (const name of ['Deadline', 'createDeadline', 'QueueBoxMetrics']) {
      assert.ok(page.includes(`\`${name}`), `the page names ${name}`);
      assert.ok(exported(name), `${name} is exported`);
    }
    const deadline = api.createDeadline({ getRemainingTimeInMillis: () => 10_000 }, 2_000);
    assert.ok(deadline.remainingMs() <= 8_000 && deadline.remainingMs() > 7_000);
    const lines: string[] = [];
    const metrics = new api.QueueBoxMetrics({ namespace: 'App', serviceName: 'app', write: (line) => lines.push(line) });
    assert.equal(typeof metrics.flush, 'function');
  });

  it('names each error class after itself, MissingPackageError included', () => {
    const error = new api.MissingPackageError('mssql', 'database.type: sqlserver', '12.7.14');
    assert.ok(error instanceof api.QueueBoxError);
    assert.equal(error.name, 'MissingPackageError');
    assert.equal(error.packageName, 'mssql');
    assert.match(error.message, /npm install mssql@12\.7\.14/);
  });

  it('keeps the optional packages optional, suggesting the versions the tests run (within the peer ranges)', () => {
    const manifest = JSON.parse(readFileSync('package.json', 'utf8')) as Record<string, Record<string, unknown>>;
    for (const [name, version] of Object.entries(OPTIONAL_PACKAGES)) {
      assert.equal(manifest.dependencies![name], undefined, `${name} is not a dependency`);
      assert.equal(manifest.devDependencies![name], version, `${name} ${version} is what the tests run`);
      assert.equal(manifest.peerDependencies![name], `^${version}`);
      assert.deepEqual(manifest.peerDependenciesMeta![name], { optional: true });
    }
  });
});
