/**
 * SQL Server outbox operations. Being written (issue 9).
 */
import type { OutboxMessageInput } from '../driver.ts';

export async function sqlServerOutboxInsert(_names: { schema: string; table: string }, _tx: unknown, _m: OutboxMessageInput, _d: { maxAttempts: number }): Promise<string> {
  throw new Error('SQL Server enqueue is not implemented yet');
}
