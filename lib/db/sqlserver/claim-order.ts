/**
 * The claim order shared by the SQL Server claims: due retries (`attempt > 0`) first, then first
 * attempts, each in the claim's own order (same rule and reason as the PostgreSQL claims).
 *
 * T-SQL allows `ORDER BY` in a `UNION ALL` branch only inside a derived table with `TOP`, so each
 * branch is its own `TOP (@p_limit)` range (an index seek each) and the outer `TOP` keeps the
 * first `@p_limit` of at most twice that many ids.
 */
export function retriesFirst(branch: (attempts: string) => string, order: readonly string[]): string {
  const columns = order.map((c) => `c.${c}`).join(', ');
  const outer = order.map((c) => `u.${c}`).join(', ');
  const pick = (priority: number, attempts: string) => `SELECT * FROM (
           SELECT TOP (@p_limit) ${priority} AS claim_priority, ${columns}
${branch(attempts)}
            ORDER BY ${columns}) AS r${priority}`;
  return `SELECT TOP (@p_limit) u.id FROM (
         ${pick(0, 'c.attempt > 0')}
         UNION ALL
         ${pick(1, 'c.attempt = 0')}
       ) AS u
        ORDER BY u.claim_priority, ${outer}`;
}
