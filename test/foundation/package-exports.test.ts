import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';

describe('the published package', () => {
  it('builds and lets an application import enqueue by package name, with types', () => {
    execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.build.json'], { stdio: 'pipe' });
    const app = mkdtempSync(join(tmpdir(), 'qb-app-'));
    mkdirSync(join(app, 'node_modules'));
    symlinkSync(resolve('.'), join(app, 'node_modules', 'queuebox'), 'dir');
    writeFileSync(join(app, 'package.json'), JSON.stringify({ type: 'module' }));
    writeFileSync(join(app, 'main.js'), `import { enqueue, ValidationError } from 'queuebox';\nconsole.log(typeof enqueue, typeof ValidationError);\n`);
    const out = execFileSync(process.execPath, ['main.js'], { cwd: app, encoding: 'utf8', env: { ...process.env, NODE_NO_WARNINGS: '1' } });
    assert.equal(out.trim(), 'function function');
    const types = readFileSync('dist/lib/index.d.ts', 'utf8');
    assert.match(types, /export \{ enqueue, type EnqueueOptions \}/, 'declarations ship the typed enqueue');
  });
});
