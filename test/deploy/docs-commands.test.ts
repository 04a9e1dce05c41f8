/**
 * What the docs say is what runs: every ```bash/```sh/```shell block of README.md and docs/*.md is
 * run literally as its comment says (syntax: `test/helpers/docs-blocks.ts`; contexts:
 * `test/helpers/docs-runner.ts`), one clone and one `npm ci` for all of them. A block without a
 * comment fails, naming its file and line. The blocks of `test/deploy/fixtures/docs-runner.md`
 * prove the runner: the service context, an interrupt, the environment, and failures it must report.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { after, describe, it } from 'node:test';
import { shellBlocks, type ShellBlock } from '../helpers/docs-blocks.ts';
import { DocsRunner } from '../helpers/docs-runner.ts';
import { testDatabaseUrl } from '../helpers/database.ts';

const DOCS = ['README.md', ...readdirSync('docs').filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];
const FIXTURE = 'test/deploy/fixtures/docs-runner.md';

/**
 * Blocks of the deploy documentation, which the Serverless plugin change rewrites and annotates:
 * reported as to-do (not failed) while they carry no comment. Empty this once it has landed.
 */

const blocks = DOCS.flatMap((file) => shellBlocks(file, readFileSync(file, 'utf8')));
const fixture = shellBlocks(FIXTURE, readFileSync(FIXTURE, 'utf8'));
const label = (b: ShellBlock) => `${b.file}:${b.line} ${b.code.split('\n')[0]!.slice(0, 60)}`;

// The whole suite installs the package several times over (a clone, a scratch application, a
// scratch Serverless service): about 8 minutes on a quiet 2-core machine, 11 on a loaded one. A
// limit it reaches tears its scratch directories down under the command still running.
describe('the docs’ shell blocks run as written', { timeout: 1_200_000 }, () => {
  const runner = new DocsRunner(process.cwd(), testDatabaseUrl());
  after(() => runner.close());

  it('every shell block of README.md and docs/*.md says how it is run', () => {
    const missing = blocks.filter((b) => b.plan.kind === 'missing');
    assert.deepEqual(missing.map((b) => `${b.file}:${b.line}: ${b.plan.kind === 'missing' ? b.plan.problem : ''}`), []);
    assert.ok(blocks.filter((b) => b.plan.kind === 'run').length >= 6, 'the docs have runnable blocks');
  });

  const register = (block: ShellBlock) => {
    const plan = block.plan;
    // A block's first run in its context sets the context up (a clone's `npm install`: up to 240 s)
    // before the block itself runs (up to 180 s, 30 s more to stop when interrupted): its limit
    // covers both, so on a loaded machine it is the runner's own bounds that end a slow step.
    if (plan.kind === 'run') it(`${label(block)} (run: ${plan.context})`, { timeout: 450_000 }, () => runner.run(block));
    else if (plan.kind === 'not run') it(label(block), { skip: `not run: ${plan.reason}` }, () => {});
  };

  // The README first and in order (its quick start installs the clone, its npm pack makes the
  // tarball); then the other files at once, each in order (`concurrency: 1`: a suite's
  // subtests inherit its concurrency, and one file's blocks build into the same directories).
  describe('README.md', () => blocks.filter((b) => b.file === 'README.md').forEach(register));
  describe('docs/*.md, and the runner itself', { concurrency: true }, () => {
    for (const file of DOCS.slice(1)) {
      const own = blocks.filter((b) => b.file === file);
      if (own.length > 0) describe(file, { concurrency: 1 }, () => own.forEach(register));
    }
    describe('the runner itself (test/deploy/fixtures/docs-runner.md)', { concurrency: 1 }, () => runnerItself(runner));
  });
});

/** The fixture blocks: what the runner must run, and what it must fail. */
function runnerItself(runner: DocsRunner): void {
  const [service, interrupted, environment, failing, unclean, notInCi, leavesSchema] = fixture;

  it('reads each fixture block with its plan and serverless.yml', () => {
    assert.equal(fixture.length, 7);
    assert.deepEqual(service!.plan, { kind: 'run', context: 'service', env: [] });
    assert.match(service!.serviceFiles['serverless.yml'] ?? '', /^service: docs-runner-fixture$/m);
    assert.deepEqual(environment!.plan, { kind: 'run', context: 'app', env: [{ name: 'QUEUEBOX_DATABASE_URL', value: undefined }, { name: 'GREETING', value: 'hello' }] });
    assert.deepEqual(interrupted!.plan, { kind: 'run', context: 'clone', interruptAfterMs: 1000, interruptAfterText: 'ready', expect: 'ready', env: [] });
    assert.deepEqual(unclean!.plan, { kind: 'run', context: 'clone', interruptAfterMs: 1000, env: [] });
  });

  it('names the problem of a missing or malformed comment', () => {
    const [none, unknown, modifier] = shellBlocks('x.md', '```sh\nls\n```\n<!-- run: laptop -->\n```sh\nls\n```\n<!-- run: app, quickly -->\n```bash\nls\n```\n');
    assert.deepEqual([none!.line, none!.plan.kind], [1, 'missing']);
    assert.match(JSON.stringify(unknown!.plan), /unknown context \\"laptop\\"/);
    assert.match(JSON.stringify(modifier!.plan), /unknown modifier \\"quickly\\"/);
  });

  it('runs a service block in a service with the tarball, osls and esbuild', { timeout: 300_000 }, () => runner.run(service!));
  it('interrupts a long-running command and accepts its clean stop', { timeout: 120_000 }, () => runner.run(interrupted!));
  it('gives a block only a user’s environment and the variables it names', { timeout: 300_000 }, () => runner.run(environment!));
  it('fails a block whose command fails, with the file, line and output', { timeout: 120_000 }, async () => {
    await assert.rejects(runner.run(failing!), (e: Error) => /docs-runner\.md:\d+ \(run: clone\) failed:\n\$ false/.test(e.message));
  });
  it('fails an interrupted command that does not stop cleanly', { timeout: 120_000 }, async () => {
    await assert.rejects(runner.run(unclean!), /did not exit cleanly:[\s\S]*exit 3, after SIGINT/);
  });
  it('fails a run: ci block that .ci/run does not run', async () => {
    await assert.rejects(runner.run(notInCi!), /\.ci\/run does not run `npm run not-in-ci` after `npm ci`/);
  });
  it('fails an interrupted command that leaves a new schema in its database', { timeout: 120_000 }, async () => {
    await assert.rejects(runner.run(leavesSchema!), /docs-runner\.md:\d+ \(run: clone\) left schema\(s\) left_behind in its database:/);
  });
}
