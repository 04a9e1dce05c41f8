/**
 * The fixture most console suites share: a fresh test database and a console server on it,
 * started before the suite's tests and stopped (then the database dropped) after them.
 */
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
