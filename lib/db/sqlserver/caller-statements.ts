/**
 * SQL Server statements QueueBox writes inside a caller's transaction when a data-layer library
 * holds it (`queuebox/<library>`), as text with `$1…$n` and the values to bind; each adapter
 * renames the placeholders for its library (`@P1`, `@0`, `?`, …). No `mssql` import: an
 * application on Prisma, TypeORM, Knex, Sequelize or MikroORM needs no `mssql` package for these.
 *
 * The same INSERT as `enqueue` on an `mssql` Transaction (`buildOutboxInsert`), with untyped
 * parameters: the id is chosen here, the schedule is an ISO 8601 text read as UTC.
 *
 * Rows a statement reports go through `OUTPUT … INTO` a table variable declared in the same batch,
 * then a `SELECT`: an `OUTPUT` without `INTO` fails (error 334) once the application adds an
 * enabled trigger to the table (see "Triggers" in "OUTPUT clause (Transact-SQL)",
 * learn.microsoft.com/sql/t-sql/queries/output-clause-transact-sql).
 */
import { randomUUID } from 'node:crypto';
import type { ClaimRef, OutboxMessageInput } from '../driver.ts';
import { ValidationError } from '../../errors.ts';
import { outboxInsertValues } from '../outbox-insert-values.ts';
import type { MssqlNames } from './names.ts';

/** One statement: text with `$n` placeholders and the values to bind. */
export interface SqlServerCallerStatement {
  text: string;
  values: unknown[];
}

/**
 * A time `ms` milliseconds after `from` (default: the database clock now); safe for BIGINT
 * amounts beyond INT milliseconds.
 */
export function dbNowPlusMs(expression: string, from = 'SYSUTCDATETIME()'): string {
  return `DATEADD(millisecond, CAST((${expression}) % 1000 AS INT), DATEADD(second, CAST((${expression}) / 1000 AS INT), ${from}))`;
}

/** The transaction depth of the connection (0: outside a transaction), read as `depth`. */
export const SQLSERVER_TRANCOUNT = 'SELECT @@TRANCOUNT AS depth';

/**
 * Refuses an outbox key of spaces only at `enqueue` on SQL Server: its `=` ignores trailing
 * spaces, so such a key equals the empty key, which is keyless (claimed freely, no order); on
 * PostgreSQL it is a key like any other. (Keys that differ only in trailing spaces share one
 * order: stricter than PostgreSQL, never looser, so they are accepted.)
 */
export function assertSqlServerOutboxKey(key: string | null | undefined): void {
  if (isSpacesOnly(key)) {
    throw new ValidationError('message.key', `must not be spaces only on SQL Server (got ${key.length} spaces): SQL Server compares it equal to the empty key, which has no order`);
  }
}

/** A key of one or more spaces and nothing else: SQL Server's `=` finds it equal to `''`. */
function isSpacesOnly(key: string | null | undefined): key is string {
  return typeof key === 'string' && /^ +$/.test(key);
}

/**
 * The outbox key the relay writes on SQL Server: a key of spaces only (an aggregate id of spaces
 * only under `inbox.relay.outboxKey: aggregate`) becomes NULL. The relay claim already took such
 * a push row as one without aggregate (`=` finds it equal to `''`), so the outbox row is keyless
 * like it, and holds no key `enqueue` would refuse (`assertSqlServerOutboxKey`); failing the
 * forward instead would fail it on every retry.
 */
export function sqlServerRelayOutboxKey(key: string | null | undefined): string | null {
  return isSpacesOnly(key) ? null : (key ?? null);
}

/** The outbox INSERT of `enqueue`; returns the statement and the row's id (lower-case). */
export function sqlServerCallerOutboxInsert(names: Pick<MssqlNames, 'outbox'>, m: OutboxMessageInput, defaults: { maxAttempts: number }): { id: string; statement: SqlServerCallerStatement } {
  assertSqlServerOutboxKey(m.key);
  const id = (m.id ?? randomUUID()).toLowerCase();
  const delay = `CAST($8 AS BIGINT)`;
  return {
    id,
    statement: {
      text: `DECLARE @v_inserted TABLE (id NVARCHAR(36) NOT NULL);
INSERT INTO ${names.outbox} (id, topic, [key], payload, headers, max_attempts, scheduled_at, trace_context)
OUTPUT LOWER(CONVERT(NVARCHAR(36), inserted.id)) INTO @v_inserted (id)
VALUES (CAST($1 AS UNIQUEIDENTIFIER), CAST($2 AS NVARCHAR(255)), CAST($3 AS NVARCHAR(255)), CAST($4 AS NVARCHAR(MAX)), CAST($5 AS NVARCHAR(MAX)), CAST($6 AS INT),
        COALESCE(CONVERT(DATETIME2(7), SWITCHOFFSET(CONVERT(DATETIMEOFFSET(7), CAST($7 AS NVARCHAR(40)), 127), '+00:00')), ${dbNowPlusMs(delay)}), CAST($9 AS NVARCHAR(1024)));
SELECT id FROM @v_inserted;`,
      values: outboxInsertValues(m, defaults, id),
    },
  };
}

/** The fenced `processed` of a pull row (the four fence conditions, pull rows only); one row back when the claim held. */
export function sqlServerCallerPullComplete(names: Pick<MssqlNames, 'inbox'>, c: ClaimRef): SqlServerCallerStatement {
  return {
    text: `DECLARE @v_changed TABLE (id UNIQUEIDENTIFIER NOT NULL);
UPDATE r SET state = N'processed', processed_at = SYSUTCDATETIME(), updated_at = SYSUTCDATETIME(), lease_expires_at = NULL, last_error = NULL
OUTPUT inserted.id INTO @v_changed (id)
FROM ${names.inbox} AS r
WHERE r.id = CAST($1 AS UNIQUEIDENTIFIER) AND r.consumption = N'pull' AND r.state = N'processing'
  AND r.claim_token = CAST($2 AS UNIQUEIDENTIFIER) AND r.lease_expires_at > SYSUTCDATETIME();
SELECT id FROM @v_changed;`,
    values: [c.id, c.token],
  };
}
