/**
 * The version of the installed `queuebox` package, read from its `package.json` (found by walking
 * up from this file: `bin/` in the repository, `dist/bin/` in the published package).
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** `version` of the nearest `package.json` named `queuebox` above this file. */
export function packageVersion(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); ; dir = dirname(dir)) {
    const path = join(dir, 'package.json');
    if (existsSync(path)) {
      const manifest = JSON.parse(readFileSync(path, 'utf8')) as { name?: string; version?: string };
      if (manifest.name === 'queuebox' && manifest.version !== undefined) return manifest.version;
    }
    if (dir === dirname(dir)) throw new Error('queuebox: package.json not found above the CLI');
  }
}
