/**
 * `enqueue` records the traceparent of OpenTelemetry's active span in a bundled application too:
 * a handler bundled with esbuild (ESM with code splitting, or CJS) and run from a folder without
 * `node_modules` (as Lambda's `/var/task`), where `@opentelemetry/api` cannot be looked up next to
 * the bundle, still sees the span through the API's process-wide registration. Trace capture
 * never makes `enqueue` throw, whatever that registration holds.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { captureTraceContext } from '../../lib/observability/trace-context.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN_ID = '00f067aa0ba902b7';

/** The application's handler: registers a context manager, makes a span active, enqueues in a transaction, reads the row back. */
const HANDLER = `
import { context, createTraceState, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import pg from 'pg';
import { enqueue } from ${JSON.stringify(join(REPO, 'lib/index.ts'))};

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

export async function handler() {
  const schema = process.env.APP_SCHEMA;
  const pool = new pg.Pool({ connectionString: process.env.APP_DATABASE_URL, max: 1 });
  const span = trace.wrapSpanContext({ traceId: '${TRACE_ID}', spanId: '${SPAN_ID}', traceFlags: 1, traceState: createTraceState('congo=t61rcWkgMzE') });
  try {
    return await context.with(trace.setSpan(context.active(), span), async () => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const id = await enqueue(client, { topic: 'order.traced', payload: { n: 1 } }, { schema });
        await client.query('COMMIT');
        const row = await client.query(\`SELECT trace_context FROM "\${schema}".outbox WHERE id = $1\`, [id]);
        return { trace_context: row.rows[0].trace_context };
      } finally {
        client.release();
      }
    });
  } finally {
    await pool.end();
  }
}
`;

const RUNNER = `
const m = await import(process.argv[2]);
console.log(JSON.stringify(await (m.handler ?? m.default.handler)()));
`;

function runNode(args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', fail);
    child.on('close', (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    });
  });
}

describe('trace context in a bundled application', { timeout: 240_000 }, () => {
  let db: TestDatabase;
  let work: string;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    db = await createTestDatabase();
    // Outside the repository: Node would otherwise find its node_modules by looking upwards.
    work = mkdtempSync(join(tmpdir(), 'qb-otel-bundle-'));
    writeFileSync(join(work, 'handler.ts'), HANDLER);
    env = { ...process.env, APP_DATABASE_URL: db.url, APP_SCHEMA: db.schema };
    delete env._X_AMZN_TRACE_ID;
  });
  after(async () => {
    await db?.drop();
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  });

  for (const format of ['esm', 'cjs'] as const) {
    it(`records the active span's traceparent and tracestate from an esbuild ${format === 'esm' ? 'ESM (split) bundle' : 'CJS bundle'} run without node_modules`, async () => {
      const out = join(work, `task-${format}`);
      await build({
        entryPoints: [join(work, 'handler.ts')],
        bundle: true,
        platform: 'node',
        target: 'node24',
        format,
        logLevel: 'silent',
        external: ['mssql'],
        // the application's packages, as its own node_modules would provide them at build time
        nodePaths: [join(REPO, 'node_modules')],
        ...(format === 'esm'
          ? { splitting: true, outdir: out, banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" } }
          : { outfile: join(out, 'handler.cjs') }),
      });
      if (format === 'esm') writeFileSync(join(out, 'package.json'), '{"type":"module"}');
      writeFileSync(join(out, 'run.mjs'), RUNNER);

      const run = await runNode(['--no-warnings', 'run.mjs', format === 'esm' ? './handler.js' : './handler.cjs'], out, env);
      assert.equal(run.code, 0, run.stderr);
      const { trace_context: stored } = JSON.parse(run.stdout) as { trace_context: unknown };
      const trace = typeof stored === 'string' ? JSON.parse(stored) : stored;
      assert.deepEqual(trace, { traceparent: `00-${TRACE_ID}-${SPAN_ID}-01`, tracestate: 'congo=t61rcWkgMzE' });
    });
  }

  it('never throws from trace capture, whatever the OpenTelemetry registration holds', () => {
    const key = Symbol.for('opentelemetry.js.api.1');
    const global = globalThis as Record<symbol, unknown>;
    const saved = global[key];
    const xray = 'Root=1-4bf92f35-77b34da6a3ce929d0e0e4736;Parent=00f067aa0ba902b7;Sampled=1';
    const savedXray = process.env._X_AMZN_TRACE_ID;
    process.env._X_AMZN_TRACE_ID = xray;
    try {
      for (const registration of [
        { version: '1.10.0', context: { active: () => { throw new Error('broken context manager'); } } },
        { version: '1.10.0', context: { active: () => ({ getValue: () => ({ spanContext: () => { throw new Error('broken span'); } }) }) } },
        { version: '1.10.0', context: { active: () => ({ getValue: () => ({ spanContext: () => ({ traceId: 42, spanId: null, traceFlags: 'x' }) }) }) } },
        { version: '1.10.0', context: { active: () => null } },
        { version: '1.10.0', context: 'not a manager' },
        42,
      ]) {
        global[key] = registration;
        assert.deepEqual(captureTraceContext(), { awsTraceHeader: xray }, JSON.stringify(registration));
      }
    } finally {
      if (saved === undefined) delete global[key];
      else global[key] = saved;
      if (savedXray === undefined) delete process.env._X_AMZN_TRACE_ID;
      else process.env._X_AMZN_TRACE_ID = savedXray;
    }
  });
});
