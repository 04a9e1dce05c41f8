/**
 * PostgreSQL inbox operations (driver methods `inbox*`). Being written (issue 5).
 */
import type { ClaimRef, DeadItem, DeadRowSummary, DeleteFinishedParams, InboxForwardItem, InboxInsertResult, InboxMessageInput, InboxRow, ReclaimResult, RetryItem, TableStats } from '../driver.ts';
import type { PgContext } from './context.ts';
import type { PgQueryable } from './pg-pool.ts';

const todo = (name: string): never => {
  throw new Error(`${name} is not implemented yet`);
};
export async function inboxInsert(_ctx: PgContext, _db: PgQueryable, _m: InboxMessageInput): Promise<InboxInsertResult> { return todo('inboxInsert'); }
export async function inboxClaimPushMany(_ctx: PgContext, _p: { limit: number; leaseMs: number }): Promise<InboxRow[]> { return todo('inboxClaimPushMany'); }
export async function inboxRenewMany(_ctx: PgContext, _p: { claims: ClaimRef[]; leaseMs: number }): Promise<string[]> { return todo('inboxRenewMany'); }
export async function inboxForward(_ctx: PgContext, _item: InboxForwardItem, _d: { maxAttempts: number }): Promise<boolean> { return todo('inboxForward'); }
export async function inboxRetryMany(_ctx: PgContext, _p: { items: RetryItem[] }): Promise<string[]> { return todo('inboxRetryMany'); }
export async function inboxMarkDeadMany(_ctx: PgContext, _p: { items: DeadItem[] }): Promise<string[]> { return todo('inboxMarkDeadMany'); }
export async function inboxReclaimExpired(_ctx: PgContext, _p: { throttleMs?: number }): Promise<ReclaimResult> { return todo('inboxReclaimExpired'); }
export async function inboxStats(_ctx: PgContext): Promise<TableStats> { return todo('inboxStats'); }
export async function inboxDeadList(_ctx: PgContext, _p: { limit: number }): Promise<DeadRowSummary[]> { return todo('inboxDeadList'); }
export async function inboxDeleteFinished(_ctx: PgContext, _p: DeleteFinishedParams): Promise<number> { return todo('inboxDeleteFinished'); }
