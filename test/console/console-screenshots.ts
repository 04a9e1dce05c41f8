/**
 * `npm run docs:console-screenshots`: seeds a schema with the console tests' rows plus a live
 * backlog, opens each console page in chromium and writes docs/images/console-*.png.
 * Uses DATABASE_URL (a schema of its own, dropped at the end), or starts an embedded PostgreSQL.
 */
import { mkdirSync } from 'node:fs';
import { startConsoleServer } from '../../lib/console/console-server.ts';
import { startEmbeddedDatabase } from '../../lib/local/embedded-database.ts';
import { browserSkipReason, launchBrowser } from '../helpers/browser.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { seedConsoleRows } from './console-seed.ts';

const skip = browserSkipReason();
if (skip) throw new Error(skip);
const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedDatabase();
if (embedded) process.env.DATABASE_URL = embedded.url;
const db = await createTestDatabase();
const seed = await seedConsoleRows(db);
await db.query(
  `INSERT INTO "${db.schema}".outbox (topic, key, payload, scheduled_at) SELECT 'orders.created', 'order-' || n, '{}', clock_timestamp() - n * interval '1 second' FROM generate_series(1, 40) n`,
);
const server = await startConsoleServer({ driver: db.driver, config: db.config, port: 0, allowActions: true });
const browser = await launchBrowser();
try {
  mkdirSync('docs/images', { recursive: true });
  const page = await browser.browser.newPage();
  const shots: Array<[string, string]> = [
    ['overview', '/'],
    ['blocked', '/blocked'],
    ['dead', '/dead?table=outbox&label=orders.failed'],
    ['row', `/row/outbox/${seed.poisonHead}`],
    ['replay-preview', '/replay/preview?topics=orders.failed'],
  ];
  for (const [name, path] of shots) {
    await page.goto(`${server.url}${path}`);
    await page.screenshot({ path: `docs/images/console-${name}.png`, fullPage: true });
    console.log(`docs/images/console-${name}.png`);
  }
  await page.click('[data-action="confirm"]');
  await page.waitForSelector('[data-moved]');
  await page.screenshot({ path: 'docs/images/console-replay-done.png', fullPage: true });
  console.log('docs/images/console-replay-done.png');
} finally {
  await browser.close();
  await server.close();
  await db.drop();
  await embedded?.stop();
}
