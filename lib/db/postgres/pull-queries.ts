/**
 * PostgreSQL pull operations (driver methods `pull*`). Being written (issue 6).
 */
import type { ClaimRef, DeadItem, InboxRow, RetryItem } from '../driver.ts';
import type { PgContext } from './context.ts';
import type { PgQueryable } from './pg-pool.ts';

const todo = (name: string): never => {
  throw new Error(`${name} is not implemented yet`);
};
export async function pullClaimMany(_ctx: PgContext, _p: { source: string; limit: number; leaseMs: number }): Promise<InboxRow[]> { return todo('pullClaimMany'); }
export async function pullRenew(_ctx: PgContext, _p: ClaimRef & { leaseMs: number }): Promise<boolean> { return todo('pullRenew'); }
export async function pullComplete(_ctx: PgContext, _db: PgQueryable, _c: ClaimRef): Promise<boolean> { return todo('pullComplete'); }
export async function pullRetry(_ctx: PgContext, _p: RetryItem): Promise<boolean> { return todo('pullRetry'); }
export async function pullMarkDead(_ctx: PgContext, _p: DeadItem): Promise<boolean> { return todo('pullMarkDead'); }
