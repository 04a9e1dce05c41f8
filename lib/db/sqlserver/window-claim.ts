/**
 * The window-first claim batch that the SQL Server outbox claim and relay claim share, built from
 * the table, its index names and its predicates (`WindowClaimShape`). The two claims differ only in
 * what groups rows (an outbox key; an inbox source and aggregate), which rows they consider (the
 * relay takes push rows only) and how they list the open groups; the steps are the same:
 *
 * 1. due retries that are ungrouped or the free head of their group;
 * 2. the window: the `OLDEST_WINDOW` batches of the oldest due rows, keeping the first attempts that
 *    are ungrouped or a free head;
 * 3. only when the window gave less than half the batch, the heads of every open group (a loose
 *    index scan of the head index) and the ungrouped rows;
 * 4. the `UPDATE` of the picked rows, which re-checks that no lower row of the group is open.
 *
 * In a table where most groups can move the batch comes from the window, and the claim's cost
 * does not grow with the number of open groups. See `claim-order.ts` for the pick-then-update
 * shape and its locks.
 */
import { mssql } from './mssql-module.ts';
import { inClaimTransaction, lockNameLiteral } from './claim-locks.ts';
import { CLAIM_SET, DECLARE_PICKED, OLDEST_WINDOW, orderedBranch, viaIndex } from './claim-order.ts';
import { leaseParam, param, type MssqlStatement } from './mssql-pool.ts';

/** The open states: the head index's filter, written as it is there. */
export const OPEN = `IN (N'pending', N'processing')`;

/** What one window-first claim reads and writes; predicates take the alias they speak of. */
export interface WindowClaimShape {
  /** The bracketed, qualified table. */
  table: string;
  /** The application lock that serializes the claim (a `MssqlNames` claim lock). */
  lockName: string;
  /** Bare index names: due retries, due rows in claim order, open rows by group head, primary key. */
  indexes: { retry: string; window: string; head: string; pkey: string };
  /** The columns that name a row's group, as written in SQL (`[key]`; `source`, `aggregate_id`). */
  group: readonly string[];
  /** `DECLARE @v_claimed …` of the returned rows. */
  declareClaimed: string;
  /** The columns the claim returns, in `@v_claimed`'s order. */
  columns: readonly string[];
  /** Whether `@v_claimed` also keeps each row's `claim_priority`. */
  keepsPriority: boolean;
  /** The alias of the claimed table in the `UPDATE`. */
  updateAlias: string;
  /** `a` is a pending row this claim may take (state, and any scope such as push rows). */
  pending: (a: string) => string;
  /** `a` has no group (NULL or empty), so no order holds it back. */
  ungrouped: (a: string) => string;
  /** `a` is its group's head with nothing of the group in flight, judged without waiting. */
  freeHead: (a: string) => string;
  /** The CTEs (after `WITH`) that list the open groups, the last one read as `openGroups.from`. */
  openGroups: { ctes: string; from: string };
  /** The open rows of the group of `openGroups.from`, for alias `r` (implies the head index's filter). */
  headOf: string;
  /** The ungrouped first attempts of step 3: branch alias and its `FROM … WHERE …` on alias `c`. */
  ungroupedBranches: readonly { alias: string; body: string }[];
  /** `h` is an open row of `a`'s group below `a`: the `UPDATE`'s re-check. */
  lowerOpen: (h: string, a: string) => string;
}

/** The claim statement of `shape`: pick, update and return the claimed rows in `sequence` order. */
export function buildWindowClaim(shape: WindowClaimShape, p: { limit: number; leaseMs: number }): MssqlStatement {
  const { table: t, indexes: idx, updateAlias: target } = shape;
  const order = ['scheduled_at', '[sequence]'] as const;
  const cols = ['id', 'scheduled_at', '[sequence]'] as const;
  const committed = 'READCOMMITTEDLOCK, READPAST';
  const groupOf = (a: string) => shape.group.map((c) => `${a}.${c}`).join(', ');
  const ungroupedOrFree = (a: string) => `(${shape.ungrouped(a)} OR (${shape.freeHead(a)}))`;
  const priority = shape.keepsPriority ? ', p.claim_priority' : '';
  const priorityColumn = shape.keepsPriority ? ', claim_priority' : '';
  const claim = `${DECLARE_PICKED}
${shape.declareClaimed}
DECLARE @v_taken INT;
DECLARE @v_window INT;
INSERT INTO @v_picked (id, claim_priority)
SELECT TOP (@p_limit) c.id, 0
  FROM ${t} AS c ${viaIndex(idx.retry, false, committed)}
 WHERE ${shape.pending('c')} AND c.attempt > 0 AND c.scheduled_at <= SYSUTCDATETIME()
   AND ${ungroupedOrFree('c')}
 ORDER BY c.scheduled_at, c.[sequence];
SET @v_taken = @@ROWCOUNT;
INSERT INTO @v_picked (id, claim_priority)
SELECT TOP (@p_limit - @v_taken) w.id, 1
  FROM (SELECT TOP (@p_limit * ${OLDEST_WINDOW}) c.id, ${groupOf('c')}, c.attempt, c.scheduled_at, c.[sequence]
          FROM ${t} AS c ${viaIndex(idx.window, false, committed)}
         WHERE ${shape.pending('c')} AND c.scheduled_at <= SYSUTCDATETIME()
         ORDER BY c.scheduled_at, c.[sequence]) AS w
 WHERE w.attempt = 0 AND ${ungroupedOrFree('w')}
 ORDER BY w.scheduled_at, w.[sequence];
SET @v_window = @@ROWCOUNT;
SET @v_taken = @v_taken + @v_window;
IF @v_window * 2 < @p_limit AND @v_taken < @p_limit
BEGIN
  WITH ${shape.openGroups.ctes},
  heads AS (
    SELECT h.id, h.scheduled_at, h.[sequence]
      FROM ${shape.openGroups.from}
     CROSS APPLY (SELECT TOP (1) r.id, ${groupOf('r')}, r.state, r.attempt, r.scheduled_at, r.[sequence]
                    FROM ${t} AS r ${viaIndex(idx.head, true, committed)}
                   WHERE ${shape.headOf}
                   ORDER BY r.[sequence]) AS h
     WHERE h.state = N'pending' AND h.attempt = 0 AND h.scheduled_at <= SYSUTCDATETIME()
       AND ${shape.freeHead('h')}
       AND NOT EXISTS (SELECT 1 FROM @v_picked AS p WHERE p.id = h.id)
  )
  INSERT INTO @v_picked (id, claim_priority)
  SELECT TOP (@p_limit - @v_taken) u.id, 1
    FROM (
           SELECT * FROM (
             SELECT TOP (@p_limit) 1 AS claim_priority, c.id, c.scheduled_at, c.[sequence]
               FROM heads AS c
              ORDER BY c.scheduled_at, c.[sequence]) AS keyed${shape.ungroupedBranches
                .map((b) => `
           UNION ALL
           ${orderedBranch(b.alias, 1, cols, b.body, order)}`)
                .join('')}
         ) AS u
   ORDER BY u.scheduled_at, u.[sequence]
  OPTION (MAXRECURSION 0);
END;
UPDATE ${target}
   ${CLAIM_SET}
OUTPUT ${shape.columns.map((c) => `inserted.${c}`).join(', ')}${priority}
  INTO @v_claimed (${shape.columns.join(', ')}${priorityColumn})
  FROM ${t} AS ${target} ${viaIndex(idx.pkey, true, 'UPDLOCK, READPAST, ROWLOCK')}
 INNER JOIN @v_picked AS p ON p.id = ${target}.id
 WHERE ${shape.pending(target)} AND ${target}.scheduled_at <= SYSUTCDATETIME()
   AND (${shape.ungrouped(target)} OR NOT EXISTS (
         SELECT 1 FROM ${t} AS h ${viaIndex(idx.head, true, 'READCOMMITTEDLOCK')}
          WHERE ${shape.lowerOpen('h', target)}));`;
  return {
    text: inClaimTransaction(lockNameLiteral(shape.lockName), claim, `SELECT ${shape.columns.join(', ')} FROM @v_claimed ORDER BY [sequence];`),
    params: [param('p_limit', mssql().Int, p.limit), leaseParam('p_lease_ms', p.leaseMs)],
  };
}
