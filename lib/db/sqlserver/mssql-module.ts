/**
 * The `mssql` package, loaded at run time only. The SQL Server modules import its types
 * (`import type`) and reach its values through `mssql()`, never through a static `import … from
 * 'mssql'`: an application bundling its own code that imports `queuebox` (esbuild, as Lambda
 * handlers are) then neither needs `mssql` installed nor marked external when it uses PostgreSQL,
 * and a single-file ESM bundle does not hoist an import of `mssql` to its top. `importOptional('mssql', …)`
 * loads it (through `loadMssql`) before any SQL Server module runs.
 */
import type Mssql from 'mssql';

/** The `mssql` package's exports. */
export type MssqlModule = typeof Mssql;

let loaded: MssqlModule | undefined;

/**
 * `import(name)` with the name as an argument: a bundler leaves it alone (it bundles only literal
 * specifiers), so Node resolves the package at run time, from where the code runs.
 */
function importAtRunTime(name: string): Promise<{ default: MssqlModule }> {
  return import(name) as Promise<{ default: MssqlModule }>;
}

/** Loads `mssql` once (Node's "cannot find package" error when it is not installed). */
export async function loadMssql(): Promise<MssqlModule> {
  loaded ??= (await importAtRunTime('mssql')).default;
  return loaded;
}

/** The loaded `mssql` package; `loadMssql` must have run (through `importOptional('mssql', …)`). */
export function mssql(): MssqlModule {
  if (loaded === undefined) throw new Error('mssql is not loaded: load the SQL Server modules through importOptional(\'mssql\', …)');
  return loaded;
}
