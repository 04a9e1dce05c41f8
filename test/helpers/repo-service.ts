/**
 * A scratch copy of this repository's Serverless service: its `serverless.yml`, `package.json`
 * and `queuebox.example.yml` copied (no `queuebox.yml`, as in a fresh clone), `infra/` (the plugin
 * loader) and `node_modules/` linked. osls builds into the copy's `.queuebox/` and `.serverless/`,
 * so parallel tests never share a build folder.
 */
import { copyFileSync, mkdtempSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/** osls as this repository runs it. */
export const OSLS = resolve('node_modules/osls/bin/serverless.js');

/** osls without telemetry, notifications or credentials from the machine. */
export const QUIET_OSLS_ENV = { SLS_TELEMETRY_DISABLED: '1', SLS_TRACKING_DISABLED: '1', SLS_NOTIFICATIONS_MODE: 'off', SLS_DEPRECATION_DISABLE: '*' };

/** Makes the copy and returns its directory (the caller removes it). */
export function scratchRepoService(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  for (const file of ['serverless.yml', 'package.json', 'queuebox.example.yml']) copyFileSync(file, join(dir, file));
  for (const link of ['infra', 'node_modules']) symlinkSync(resolve(link), join(dir, link));
  return dir;
}
