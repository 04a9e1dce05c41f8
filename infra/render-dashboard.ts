/**
 * `npm run docs:dashboard`: renders the deployed dashboard (`dashboard.ts`, from the panel list in
 * `monitoring.ts`) with the metric values of a short local run (`dashboard-sample-run.ts`) and
 * screenshots it with headless Chromium into `docs/images/dashboard.png`.
 *
 * Needs Chromium (`apt-get install -y chromium` on Debian; `CHROMIUM` names another binary) and a
 * PostgreSQL server (`DATABASE_URL`, else an embedded one is started for the run).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { startEmbeddedDatabase } from '../lib/local/embedded-database.ts';
import { dashboardHtml, pageSize } from './dashboard-html.ts';
import { runSample } from './dashboard-sample-run.ts';
import { dashboardBodyText } from '../lib/serverless/dashboard.ts';

const OUTPUT = 'docs/images/dashboard.png';
const ROUNDS = 30;

const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedDatabase();
try {
  const databaseUrl = process.env.DATABASE_URL ?? embedded!.url;
  console.log(`local run: ${ROUNDS} rounds…`);
  const { config, rounds } = await runSample({ databaseUrl, rounds: ROUNDS, out: (line) => console.log(line) });
  const body = dashboardBodyText(config);
  const caption = `Rendered from lib/serverless/dashboard.ts with the EMF metrics of a local run: ${ROUNDS} rounds (x axis), each one scheduled invocation of the poller, the relay and a pull worker, with EventBridge throttling in rounds 9–11 and one refused entry in round 23.`;
  const dir = mkdtempSync(join(tmpdir(), 'qb-dashboard-'));
  try {
    const page = join(dir, 'dashboard.html');
    writeFileSync(page, dashboardHtml(body, rounds, caption));
    const { width, height } = pageSize(body);
    mkdirSync('docs/images', { recursive: true });
    const chromium = process.env.CHROMIUM ?? 'chromium';
    const shot = spawnSync(
      chromium,
      [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--no-first-run',
        '--hide-scrollbars',
        `--user-data-dir=${join(dir, 'profile')}`,
        `--window-size=${width},${height}`,
        `--screenshot=${resolve(OUTPUT)}`,
        `file://${page}`,
      ],
      { encoding: 'utf8', timeout: 60_000 },
    );
    if (shot.status !== 0) throw new Error(`${chromium} failed (${shot.status ?? shot.signal}): ${shot.stderr}${shot.error ? ` ${shot.error.message}` : ''}`);
    console.log(`wrote ${OUTPUT} (${width}×${height})`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
} finally {
  await embedded?.stop();
}
