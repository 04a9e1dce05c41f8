/**
 * Runs the shell blocks of the docs as a user would type them (plans: `docs-blocks.ts`). Under one
 * scratch directory:
 *
 * - `queuebox/` — the clone context: a copy of the repository under test (its committed files plus
 *   uncommitted changes and new files git does not ignore), after the quick start's install
 *   (`npm ci`). Blocks share it, in the order they run.
 * - `app/` — the app context: `npm init -y`, then `npm install` of the package packed from the clone
 *   (`queuebox-<version>.tgz`, the one a `npm pack` block made, or packed here). A block after
 *   `<!-- file: NAME -->` blocks (the app's `queuebox.yml`) runs in a copy of it for its Markdown
 *   file, with those files.
 * - `service/` — the service context: like `app/`, plus osls and esbuild at this repository's
 *   versions, and the block's serverless.yml.
 *
 * Each block runs with `userEnvironment()` plus the variables of its `with` modifiers; a
 * `…DATABASE_URL` variable names a fresh database (one per Markdown file) on the test server. An
 * interrupted command (Ctrl-C) must leave no new schema in that database: the docs say Ctrl-C
 * stops a run, and a run that leaves its tables behind has not stopped cleanly.
 */
import { randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { blockCommands, type ShellBlock } from './docs-blocks.ts';
import { describeResult, runShell, userEnvironment } from './shell-run.ts';

const SETUP_TIMEOUT_MS = 240_000;
const BLOCK_TIMEOUT_MS = 180_000;
/** How long an interrupted command may take to stop after SIGINT. */
const STOP_GRACE_MS = 30_000;

/** The schemas of the database at `url`, but the system's. */
async function schemas(url: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ nspname: string }>(`SELECT nspname FROM pg_namespace WHERE nspname !~ '^(pg_|information_schema$)' ORDER BY 1`);
    return rows.map((r) => r.nspname);
  } finally {
    await client.end();
  }
}

/** Runs doc blocks against one repository; `close()` removes everything it made. */
export class DocsRunner {
  readonly root: string;
  readonly clone: string;
  readonly app: string;
  readonly service: string;
  private readonly setups = new Map<string, Promise<void>>();
  private readonly databases = new Map<string, string>();
  private readonly manifest: { version: string; devDependencies: Record<string, string> };

  constructor(private readonly repository: string, private readonly serverUrl: string) {
    this.root = mkdtempSync(join(tmpdir(), 'queuebox-docs-'));
    chmodSync(this.root, 0o755); // as a home directory: the embedded PostgreSQL's OS user enters it
    this.clone = join(this.root, 'queuebox');
    this.app = join(this.root, 'app');
    this.service = join(this.root, 'service');
    this.manifest = JSON.parse(readFileSync(join(repository, 'package.json'), 'utf8')) as DocsRunner['manifest'];
  }

  /** Runs one block; throws an Error naming the file, line, command and output on failure. */
  async run(block: ShellBlock): Promise<void> {
    if (block.plan.kind !== 'run') throw new Error(`${block.file}:${block.line}: not a runnable block`);
    const { context, interruptAfterMs, interruptAfterText } = block.plan;
    if (context === 'ci') return this.checkCi(block);
    const cwd = await this.prepare(block);
    const env = userEnvironment(await this.variables(block));
    const where = `${block.file}:${block.line} (run: ${context})`;
    let output = '';
    if (interruptAfterMs === undefined) {
      const result = await runShell(block.code, { cwd, env, timeoutMs: BLOCK_TIMEOUT_MS });
      if (result.code !== 0) throw new Error(`${where} failed:\n${describeResult(block.code, result)}`);
      output = result.output;
    } else {
      const database = Object.entries(env).find(([name]) => name.endsWith('DATABASE_URL'))?.[1];
      for (const command of blockCommands(block.code)) {
        const timeoutMs = interruptAfterText === undefined ? interruptAfterMs + STOP_GRACE_MS : BLOCK_TIMEOUT_MS;
        const before = database === undefined ? [] : await schemas(database);
        const result = await runShell(command, { cwd, env, interruptAfterMs, interruptAfterText, timeoutMs });
        const clean = result.code === 0 || (result.interrupted && (result.code === 130 || result.signal === 'SIGINT'));
        if (!clean || result.timedOut) throw new Error(`${where} did not exit cleanly:\n${describeResult(command, result)}`);
        const left = database === undefined ? [] : (await schemas(database)).filter((s) => !before.includes(s));
        if (left.length > 0) throw new Error(`${where} left schema(s) ${left.join(', ')} in its database:\n${describeResult(command, result)}`);
        output += result.output;
      }
    }
    const expected = block.plan.expect;
    if (expected !== undefined && !output.includes(expected)) throw new Error(`${where}: the output does not contain "${expected}":\n${output}`);
  }

  /**
   * Drops the databases made for the blocks and removes the scratch directory, and the entries
   * `npx` made for it in npm's cache (`npx queuebox` in a clone links the clone there).
   */
  async close(): Promise<void> {
    const pool = new pg.Pool({ connectionString: this.serverUrl, max: 1 });
    try {
      for (const name of this.databases.values()) await pool.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    } finally {
      await pool.end();
      await rm(this.root, { recursive: true, force: true });
      const npx = join(homedir(), '.npm', '_npx');
      for (const entry of existsSync(npx) ? readdirSync(npx) : []) {
        const manifest = join(npx, entry, 'package.json');
        if (existsSync(manifest) && readFileSync(manifest, 'utf8').includes(this.root)) rmSync(join(npx, entry), { recursive: true, force: true });
      }
    }
  }

  private async prepare(block: ShellBlock): Promise<string> {
    const context = block.plan.kind === 'run' ? block.plan.context : 'clone';
    await this.once('clone', () => this.makeClone());
    if (context === 'clone') return this.clone;
    const tarball = await this.tarball();
    if (context === 'app') {
      await this.once('app', () => this.makeApp(this.app, [tarball]));
      return Object.keys(block.serviceFiles).length === 0 ? this.app : this.withFiles(this.app, 'app', block);
    }
    // A service's files are those its doc showed so far (an install comes before serverless.yml).
    const dev = this.manifest.devDependencies;
    await this.once('service', () => this.makeApp(this.service, [tarball, `osls@${dev.osls}`, `esbuild@${dev.esbuild}`]));
    return this.withFiles(this.service, 'service', block);
  }

  /**
   * The directory of `block`'s Markdown file for a context: one per file (files run at once, each
   * writing its own serverless.yml or queuebox.yml), sharing the context's one install, with the
   * files the doc showed so far.
   */
  private withFiles(installed: string, context: string, block: ShellBlock): string {
    const dir = join(this.root, `${context}-${block.file.replace(/[^A-Za-z0-9]+/g, '-')}`);
    if (!existsSync(dir)) {
      mkdirSync(dir);
      // A hard-linked copy (fast, and a real tree: npx does not see packages through a symlink).
      execFileSync('cp', ['-al', join(installed, 'node_modules'), join(dir, 'node_modules')]);
      for (const file of ['package.json', 'package-lock.json']) cpSync(join(installed, file), join(dir, file));
    }
    for (const [name, text] of Object.entries(block.serviceFiles)) writeFileSync(join(dir, name), text);
    return dir;
  }

  private once(name: string, make: () => Promise<void>): Promise<void> {
    if (!this.setups.has(name)) this.setups.set(name, make());
    return this.setups.get(name)!;
  }

  private async makeClone(): Promise<void> {
    const listed = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: this.repository, encoding: 'utf8' });
    for (const file of new Set(listed.split('\0').filter(Boolean))) {
      const from = join(this.repository, file);
      if (!existsSync(from)) continue; // deleted in the working tree
      mkdirSync(dirname(join(this.clone, file)), { recursive: true });
      cpSync(from, join(this.clone, file));
    }
    await this.setup(this.clone, 'npm ci');
  }

  /** The packed package in the clone: the one a doc's `npm pack` made, or packed now. */
  private async tarball(): Promise<string> {
    const path = join(this.clone, `queuebox-${this.manifest.version}.tgz`);
    await this.once('pack', async () => {
      if (!existsSync(path)) await this.setup(this.clone, 'npm pack');
    });
    return path;
  }

  private async makeApp(dir: string, packages: string[]): Promise<void> {
    mkdirSync(dir, { recursive: true });
    await this.setup(dir, `npm init -y >/dev/null && npm install ${packages.join(' ')}`);
  }

  private async setup(cwd: string, command: string): Promise<void> {
    const result = await runShell(command, { cwd, env: userEnvironment(), timeoutMs: SETUP_TIMEOUT_MS });
    if (result.code !== 0) throw new Error(`setting up ${cwd} failed:\n${describeResult(command, result)}`);
  }

  private async variables(block: ShellBlock): Promise<Record<string, string>> {
    const out: Record<string, string> = {};
    if (block.plan.kind !== 'run') return out;
    for (const { name, value } of block.plan.env) {
      if (value !== undefined) out[name] = value;
      else if (name.endsWith('DATABASE_URL')) out[name] = await this.database(block.file);
      else throw new Error(`${block.file}:${block.line}: "with ${name}" needs a value (with ${name}=…)`);
    }
    return out;
  }

  /** A fresh database on the test server for one Markdown file. */
  private async database(file: string): Promise<string> {
    if (!this.databases.has(file)) {
      const name = `queuebox_docs_${randomBytes(5).toString('hex')}`;
      const pool = new pg.Pool({ connectionString: this.serverUrl, max: 1 });
      try {
        await pool.query(`CREATE DATABASE "${name}"`);
      } finally {
        await pool.end();
      }
      this.databases.set(file, name);
    }
    const url = new URL(this.serverUrl);
    url.pathname = `/${this.databases.get(file)}`;
    return url.toString();
  }

  /** A `run: ci` block: `.ci/run` runs each of its commands as written, after `npm ci`. */
  private checkCi(block: ShellBlock): void {
    const lines = readFileSync(join(this.repository, '.ci/run'), 'utf8').split('\n').map((l) => l.trim());
    const install = lines.findIndex((l) => /^npm ci( |$)/.test(l));
    for (const command of blockCommands(block.code)) {
      const escaped = command.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      const runs = new RegExp(`^(?:env -u [A-Z_]+ |[A-Z_]+=\\S+ )*${escaped}$`);
      const at = lines.findIndex((l, i) => i > install && runs.test(l));
      if (install < 0 || at < 0) throw new Error(`${block.file}:${block.line} (run: ci): .ci/run does not run \`${command}\` after \`npm ci\``);
    }
  }
}
