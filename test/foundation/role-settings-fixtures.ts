/**
 * A login role of its own for a test file, whose settings (`ALTER ROLE … SET`) every new
 * connection of it starts with: what an operator's role or database defaults do to QueueBox.
 */
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { parseConfig } from '../../lib/config/load-config.ts';
import { PostgresDriver } from '../../lib/db/postgres/postgres-driver.ts';
import { withStatementBudget } from '../../lib/db/statement-budget.ts';
import type { TestDatabase } from '../helpers/database.ts';

/** A driver of the test's schema logging in as `role`: `database` settings over the test's, or on `pool` (the caller's, not ended by the driver). */
export function driverAsRole(db: TestDatabase, role: TestRole, options: { database?: Record<string, unknown>; pool?: pg.Pool } = {}): PostgresDriver {
  const config = parseConfig({ ...db.config, database: { ...db.config.database, url: role.url, ...options.database } } as never);
  return new PostgresDriver({ config, url: role.url, ...(options.pool ? { pool: options.pool } : {}) });
}

export interface TestRole {
  name: string;
  /** The test database's URL, logging in as the role. */
  url: string;
  /** Drops the role (its connections must be closed first). */
  drop(): Promise<void>;
}

/** Creates a superuser login role (it reads and writes the test schema as the tests' own role does) with `settings`. */
export async function createRoleWith(db: TestDatabase, settings: Record<string, string>): Promise<TestRole> {
  const name = `qb_role_${randomBytes(5).toString('hex')}`;
  const password = randomBytes(12).toString('hex');
  await db.pool.query(`CREATE ROLE ${name} LOGIN SUPERUSER PASSWORD '${password}'`);
  for (const [setting, value] of Object.entries(settings)) await db.pool.query(`ALTER ROLE ${name} SET ${setting} = '${value}'`);
  const url = new URL(db.url);
  url.username = name;
  url.password = password;
  return {
    name,
    url: url.href,
    async drop() {
      for (let i = 0; i < 100; i++) {
        const { rows } = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = $1', [name]);
        if (rows[0]!.n === 0) break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await db.pool.query(`DROP ROLE IF EXISTS ${name}`);
    },
  };
}

/** Where a statement of QueueBox's runs, for tests that check every path: outside a pass, and under a pass's budget below and above the pool's statement timeout. */
export const STATEMENT_BUDGETS: ReadonlyArray<readonly [string, number | undefined]> = [
  ['outside a pass', undefined],
  ['under a budget below the statement timeout', 5_000],
  ['under a budget above the statement timeout', 600_000],
];

/** Runs `work` under `budgetMs` as a pass's statement budget, or as it is without one. */
export function withinBudget<T>(budgetMs: number | undefined, work: () => Promise<T>): Promise<T> {
  return budgetMs === undefined ? work() : withStatementBudget(() => budgetMs, work);
}
