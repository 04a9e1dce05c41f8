/**
 * Which claim functions in the schema are QueueBox's own, and what `migrate` does about them.
 *
 * A function is QueueBox's own when its owner is trusted (`schema-trust.ts`) and its definition
 * is exactly the one `claimFunctionDdl` creates: the body (`prosrc`), PL/pgSQL, `SECURITY INVOKER`,
 * `VOLATILE`, a set-returning plain function, the argument types, and the plan settings and the
 * `search_path` of `claimFunctionDdl` and no other (`proconfig`: another `search_path` there would
 * change what the body's names mean). The comment
 * proves nothing — anyone may comment a function they own — and is not read here.
 */
import { SchemaTrustError } from '../../errors.ts';
import type { MigrateResult } from '../driver.ts';
import { CLAIM_FUNCTION_COMMENT, CLAIM_FUNCTION_SETTINGS, claimFunctionBody, claimFunctionDdl, claimFunctionName, type ClaimFunctionVerdict, type ClaimStatement } from './claim-functions.ts';
import type { PgNames } from './names.ts';
import { pgQuery, pgSimpleQuery, type PgQueryable } from './pg-pool.ts';
import { TRUST_SCOPE, trustedRole } from './schema-trust.ts';

interface FunctionRow {
  name: string;
  oid: string;
  signature: string;
  owner: string;
  trusted: boolean;
  args: string;
  exact: boolean;
}

/** The verdict on the function of each statement (same order), in one round trip. */
export async function checkClaimFunctions(db: PgQueryable, names: PgNames, statements: readonly ClaimStatement[]): Promise<ClaimFunctionVerdict[]> {
  if (statements.length === 0) return [];
  const { rows } = await pgQuery<FunctionRow>(db, 
    `WITH ${TRUST_SCOPE}
     SELECT p.proname AS name, p.oid::text AS oid, p.oid::regprocedure::text AS signature,
            pg_get_userbyid(p.proowner) AS owner, ${trustedRole('p.proowner')} AS trusted,
            pg_get_function_identity_arguments(p.oid) AS args,
            (p.prosrc = b.body AND l.lanname = 'plpgsql' AND NOT p.prosecdef AND p.provolatile = 'v'
             AND p.proretset AND p.prokind = 'f' AND p.proconfig IS NOT DISTINCT FROM $4::text[]) AS exact
       FROM pg_proc p
       JOIN pg_language l ON l.oid = p.prolang
       JOIN unnest($2::text[], $3::text[]) AS b(name, body) ON b.name = p.proname,
            s, me
      WHERE p.pronamespace = s.oid
      ORDER BY p.oid`,
    [names.schema, statements.map(claimFunctionName), statements.map(claimFunctionBody), [...CLAIM_FUNCTION_SETTINGS]],
  );
  return statements.map((statement) => verdict(statement, rows.filter((r) => r.name === claimFunctionName(statement))));
}

function verdict(statement: ClaimStatement, rows: FunctionRow[]): ClaimFunctionVerdict {
  const foreign = rows.find((r) => !r.trusted);
  if (foreign !== undefined) {
    return { status: 'foreign', owner: foreign.owner, detail: `function ${foreign.signature} belongs to role ${foreign.owner}, not to QueueBox: it is never called, and migrate neither keeps nor replaces it (drop it as its owner or a superuser)` };
  }
  const mine = rows.find((r) => r.args === statement.params.join(', '));
  if (mine === undefined) return { status: 'missing' };
  if (!mine.exact) {
    return { status: 'altered', owner: mine.owner, detail: `function ${mine.signature} (owner ${mine.owner}) is not the definition QueueBox creates (body, language, settings or security differ): it is never called; queuebox migrate replaces it` };
  }
  return { status: 'usable', oid: Number(mine.oid) };
}

/** What `migrate` did to the claim functions (names; see `MigrateResult`). */
export type ClaimFunctionChanges = NonNullable<MigrateResult['claimFunctions']>;

/**
 * Creates the functions of `statements` that do not exist yet, replaces altered ones of a trusted
 * owner, and drops QueueBox's claim functions of the outbox table that are not among them. Refuses
 * (`SchemaTrustError`, nothing changed: it runs inside the migrate transaction) when a function of
 * a wanted name belongs to a role that is not trusted: it neither keeps nor replaces nor drops it.
 * A function that is QueueBox's own is left as it is (its name is the digest of its definition),
 * so a `migrate` with nothing to change changes nothing — also when run by a role that does not
 * own the functions.
 */
export async function installClaimFunctions(client: PgQueryable, names: PgNames, statements: readonly ClaimStatement[]): Promise<ClaimFunctionChanges> {
  const verdicts = await checkClaimFunctions(client, names, statements);
  const refused = verdicts.flatMap((v) => (v.status === 'foreign' ? [v.detail] : []));
  if (refused.length > 0) throw new SchemaTrustError(names.schema, refused);
  const changes: ClaimFunctionChanges = { created: [], replaced: [], kept: [], dropped: [], notDropped: [] };
  const wanted = new Set<string>();
  for (const [index, statement] of statements.entries()) {
    const name = claimFunctionName(statement);
    wanted.add(name);
    const status = verdicts[index]!.status;
    if (status === 'usable') {
      changes.kept.push(name);
      continue;
    }
    await pgSimpleQuery(client, claimFunctionDdl(names, statement));
    (status === 'altered' ? changes.replaced : changes.created).push(name);
  }
  // Stale functions: only QueueBox's name pattern for this outbox table, with its comment, and
  // only those this role may drop (it is a member of their owner) — never another role's object.
  const { rows } = await pgQuery<{ name: string; signature: string; droppable: boolean }>(client, 
    `SELECT p.proname AS name, p.oid::regprocedure::text AS signature, pg_has_role(p.proowner, 'USAGE') AS droppable
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = $1 AND obj_description(p.oid, 'pg_proc') IS NOT DISTINCT FROM $2
        AND p.proname ~ ('^' || $3 || '_claim_[0-9a-f]{12}$') AND NOT p.proname = ANY($4::text[])
      ORDER BY p.proname`,
    [names.schema, CLAIM_FUNCTION_COMMENT, names.outboxTable, [...wanted]],
  );
  for (const row of rows) {
    if (!row.droppable) {
      changes.notDropped.push(row.name);
      continue;
    }
    // The signature comes from the catalog (`regprocedure`: schema-qualified and quoted as needed).
    await pgSimpleQuery(client, `DROP FUNCTION IF EXISTS ${row.signature}`);
    changes.dropped.push(row.name);
  }
  return changes;
}
