/**
 * The SQL Server driver. Being written (issue 9).
 */
import type { QueueBoxConfig } from '../../config/schema.ts';

export class SqlServerDriver {
  constructor(_options: { config: QueueBoxConfig; url: string }) {
    throw new Error('The SQL Server driver is not implemented yet');
  }
}
