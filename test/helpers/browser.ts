/**
 * A real headless browser for tests: Debian's `chromium` driven by `playwright-core`.
 * `browserSkipReason()` says why browser tests cannot run here (no chromium), so they skip with it.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

/** Where `.ci/run` installs chromium (`apt-get install chromium`). */
export const CHROMIUM_PATH = '/usr/bin/chromium';

/** Undefined when chromium is available; otherwise the reason to skip. */
export function browserSkipReason(): string | undefined {
  return existsSync(CHROMIUM_PATH) ? undefined : `${CHROMIUM_PATH} is not installed (apt-get install -y chromium; .ci/run installs it)`;
}

/**
 * A launched browser on a fresh profile directory (Playwright sets `--user-data-dir` from it);
 * `close` also removes the profile.
 */
export async function launchBrowser(): Promise<{ browser: BrowserContext; close(): Promise<void> }> {
  const profile = mkdtempSync(join(tmpdir(), 'queuebox-chromium-'));
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM_PATH,
    headless: true,
    viewport: { width: 1280, height: 800 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    browser,
    async close() {
      await browser.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
