/**
 * The fixture most console suites share: a fresh test database and a console server on it,
 * started before the suite's tests and stopped (then the database dropped) after them.
 */
import { request } from 'node:http';
import { after, before } from 'node:test';
import { startConsoleServer, type ConsoleServer, type ConsoleServerOptions } from '../../lib/console/console-server.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

/** Registers the suite's `before`/`after`; `started` receives the database and server once up. */
export function withConsoleServer(options: Omit<ConsoleServerOptions, 'driver' | 'config' | 'port'>, started: (db: TestDatabase, server: ConsoleServer) => void): void {
  let db: TestDatabase | undefined;
  let server: ConsoleServer | undefined;
  before(async () => {
    db = await createTestDatabase();
    server = await startConsoleServer({ driver: db.driver, config: db.config, port: 0, ...options });
    started(db, server);
  });
  after(async () => {
    await server?.close();
    await db?.drop();
  });
}

/** One HTTP request to a console: status, body, and the cookies it set (as a `Cookie` header). */
export function consoleCall(url: string, options: { method?: string; path: string; headers?: Record<string, string>; body?: string }) {
  const target = new URL(url);
  return new Promise<{ status: number; body: string; cookie: string }>((resolve, reject) => {
    const req = request({ host: target.hostname, port: target.port, path: options.path, method: options.method ?? 'GET', headers: options.headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, cookie: (res.headers['set-cookie'] ?? []).map((c) => c.split(';')[0]).join('; ') }));
    });
    req.on('error', reject);
    req.end(options.body);
  });
}
