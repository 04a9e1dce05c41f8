/**
 * Ctrl-C (SIGINT) or SIGTERM on a runner that loads a user's database — `npm run test:faults`,
 * the `npm run bench…` scripts — drops the schemas (and databases) the run created before the
 * process exits, so an interrupted run leaves no `qb_test_…`/`qb_bench_…` schema full of rows behind.
 *
 * The code that creates a schema registers it (`createdSchema`, which returns the call that
 * forgets it once the code dropped it itself; `createdDatabase` for a database of its own on the
 * server); the runner's entry point arms the handlers
 * (`dropSchemasOnSignal`). Until then registering does nothing else, so a test process that
 * creates schemas through the same helpers keeps Node's own Ctrl-C behaviour.
 *
 * On the signal, all at once and without returning to the event loop (so no part of the run goes
 * on or exits meanwhile): the child processes the run registered (`childProcess`: bench cases,
 * passes) are killed — the schemas they work in are named and registered by this process — then a
 * separate short-lived Node process drops every registered schema, first ending the database
 * sessions that hold a lock in it (the run's own, now idle or killed), and every registered
 * database (`WITH (FORCE)`: its sessions are ended), within
 * `DROP_TIMEOUT_MS`; then the process exits with 130 (SIGINT) or 143 (SIGTERM). A schema it could
 * not drop is named on stderr.
 */
import type { ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';

/** How long dropping the schemas may take before the run exits without them dropped. */
export const DROP_TIMEOUT_MS = 20_000;

/** The schemas this process created and has not dropped, per database URL. */
const created = new Map<string, Set<string>>();
/** The databases this process created and has not dropped, per server URL (a database on it to connect to). */
const databases = new Map<string, Set<string>>();
const children = new Set<ChildProcess>();
let armed = false;
let stopping = false;

/** Registers a schema this run created in the database at `url`; the returned call forgets it (once the run dropped it itself). */
export function createdSchema(url: string, schema: string): () => void {
  return register(created, url, schema);
}

/** Registers a database this run created on the server at `serverUrl`; the returned call forgets it. */
export function createdDatabase(serverUrl: string, name: string): () => void {
  return register(databases, serverUrl, name);
}

function register(registry: Map<string, Set<string>>, url: string, name: string): () => void {
  const names = registry.get(url) ?? new Set<string>();
  registry.set(url, names);
  names.add(name);
  return () => {
    names.delete(name);
    if (names.size === 0 && registry.get(url) === names) registry.delete(url);
  };
}

/** Registers a child process of the run, killed on the signal before the schemas are dropped. */
export function childProcess(child: ChildProcess): void {
  children.add(child);
  child.once('exit', () => children.delete(child));
}

/**
 * Arms the SIGINT and SIGTERM handlers of this process (once; later calls do nothing) when the run
 * uses the user's database: call it before the run starts an embedded PostgreSQL. Without
 * `DATABASE_URL` nothing is armed: the embedded PostgreSQL started for the run goes whole when the
 * run ends (its supervisor stops it and removes its files once this process is gone).
 */
export function dropSchemasOnSignal(): void {
  if (armed || !process.env.DATABASE_URL) return;
  armed = true;
  process.on('SIGINT', () => stop('SIGINT', 130));
  process.on('SIGTERM', () => stop('SIGTERM', 143));
}

function stop(signal: NodeJS.Signals, code: number): void {
  if (stopping) return;
  stopping = true;
  for (const child of children) child.kill('SIGKILL');
  const targets = [
    ...[...created].filter(([, names]) => names.size > 0).map(([url, names]) => ({ url, schemas: [...names], databases: [] as string[] })),
    ...[...databases].filter(([, names]) => names.size > 0).map(([url, names]) => ({ url, schemas: [] as string[], databases: [...names] })),
  ];
  if (targets.length > 0) {
    process.stderr.write(`\n${signal}: dropping what this run created in the database\n`);
    try {
      // Synchronous: the run's own code (its pools, its catch blocks, its process.exit) does not
      // run until the schemas are gone. The dropping process ignores a second Ctrl-C.
      execFileSync(process.execPath, ['--input-type=module', '-e', DROP_SCRIPT, JSON.stringify({ pg: import.meta.resolve('pg'), targets, deadline: Date.now() + DROP_TIMEOUT_MS - 2_000 })], {
        stdio: ['ignore', 'inherit', 'inherit'],
        timeout: DROP_TIMEOUT_MS,
        killSignal: 'SIGKILL',
      });
    } catch {
      const left = targets.flatMap(({ url, schemas, databases: names }) => [
        ...schemas.map((s) => `schema ${s} (database ${new URL(url).pathname.slice(1)}; DROP SCHEMA … CASCADE)`),
        ...names.map((d) => `database ${d} (DROP DATABASE … WITH (FORCE))`),
      ]);
      process.stderr.write(`not everything this run created was dropped (above, or the ${DROP_TIMEOUT_MS / 1000} s ran out); drop what is left of ${left.join(', ')}\n`);
    }
  }
  process.exit(code);
}

/**
 * Run by `node --input-type=module -e` with one JSON argument `{ pg, targets, deadline }`: for each
 * schema, ends the other sessions (of this role) holding a lock on it or on one of its relations,
 * then `DROP SCHEMA … CASCADE` under a short lock timeout, again until the deadline; each database
 * goes with `DROP DATABASE … WITH (FORCE)`. Sessions of other drops (a second runner) are left
 * alone: a deadlock between two drops is retried.
 */
const DROP_SCRIPT = `
process.on('SIGINT', () => {});
process.on('SIGTERM', () => {});
const { pg: pgUrl, targets, deadline } = JSON.parse(process.argv[1]);
const pg = (await import(pgUrl)).default;
const APP = 'queuebox-drop-on-signal';
let failed = false;
for (const { url, schemas, databases } of targets) {
  const client = new pg.Client({ connectionString: url, application_name: APP, connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
    await client.query("SET lock_timeout = '1s'");
    for (const schema of schemas) {
      if ((await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema])).rowCount === 0) continue;
      for (;;) {
        await client.query(
          \`SELECT pg_terminate_backend(a.pid)
             FROM pg_stat_activity a
            WHERE a.pid <> pg_backend_pid() AND a.application_name <> $2 AND pg_has_role(a.usesysid, 'MEMBER')
              AND a.pid IN (SELECT l.pid FROM pg_locks l
                             WHERE l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                               AND (l.relation IN (SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1)
                                    OR (l.classid = 'pg_namespace'::regclass AND l.objid = (SELECT oid FROM pg_namespace WHERE nspname = $1))))\`,
          [schema, APP],
        );
        try {
          await client.query(\`DROP SCHEMA IF EXISTS "\${schema.replaceAll('"', '""')}" CASCADE\`);
          process.stderr.write(\`dropped schema \${schema}\\n\`);
          break;
        } catch (error) {
          if (!['55P03', '40P01'].includes(error.code) || Date.now() > deadline) throw error;
        }
      }
    }
    for (const name of databases) {
      if ((await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount === 0) continue;
      await client.query(\`DROP DATABASE IF EXISTS "\${name.replaceAll('"', '""')}" WITH (FORCE)\`);
      process.stderr.write(\`dropped database \${name}\\n\`);
    }
  } catch (error) {
    failed = true;
    process.stderr.write(\`could not drop \${[...schemas, ...databases].join(', ')}: \${error.message}\\n\`);
  } finally {
    await client.end().catch(() => {});
  }
}
process.exit(failed ? 1 : 0);
`;
