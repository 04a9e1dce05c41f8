/**
 * Whose objects QueueBox may use in its schema. QueueBox runs what it finds there with its own
 * rights — the claim functions are called, the tables carry triggers and defaults — so an object
 * planted by another role runs as QueueBox. `migrate` and driver start-up therefore refuse a
 * schema that other roles may create objects in, and `migrate` refuses to adopt an object of a
 * name it uses that another role owns.
 *
 * A role is trusted when it is the current role, a role the current role is a member of (it may
 * act as it), a superuser, or the schema's owner or a member of it: the schema's owner may drop
 * and replace anything in its schema anyway, and a superuser anything anywhere, so trusting them
 * adds nothing an attacker could use. When the current role is itself a superuser,
 * `pg_has_role` answers "member" for every role, so only the first, third and fourth rules apply:
 * a superuser that ran another role's function would hand that role everything.
 */
import { QueueBoxError } from '../../errors.ts';
import type { PgNames } from './names.ts';
import { isPgPool, pgQuery, pgTransaction, type PgQueryable } from './pg-pool.ts';

/**
 * SQL: the database's encoding. QueueBox stores message bodies (JSON) and names of any Unicode
 * text, so it needs UTF8: under LATIN1 (or any other single-byte encoding) a character it cannot
 * store fails the statement that carries it, and under SQL_ASCII text is stored as bytes, unchecked,
 * so a length counts bytes and a body read back is not the one written.
 */
export const PG_SERVER_ENCODING_SQL = `SELECT pg_catalog.current_setting('server_encoding') AS encoding`;

/** Why QueueBox may not use a database of `encoding` (undefined: UTF8, it may). */
export function serverEncodingProblem(encoding: string): string | undefined {
  if (encoding === 'UTF8') return undefined;
  return `the database's encoding is ${encoding} (server_encoding), and QueueBox needs UTF8: it stores message bodies (JSON) and names of any Unicode text, which ${encoding} ${encoding === 'SQL_ASCII' ? 'stores as unchecked bytes (lengths and bodies of non-ASCII text go wrong)' : 'cannot hold'}; create the database with ENCODING 'UTF8' (CREATE DATABASE <name> ENCODING 'UTF8' TEMPLATE template0) and run queuebox migrate there`;
}

/**
 * Throws a `QueueBoxError` naming the encoding and the fix when the database is not UTF8
 * (`serverEncodingProblem`); `prefix` says what refuses (`migrate refused, nothing changed`).
 * One round trip, sent before any statement whose text or values could fail on the encoding.
 */
export async function pgRequireUtf8(db: PgQueryable, prefix = 'QueueBox refuses this database'): Promise<void> {
  const { rows } = await pgQuery<{ encoding: string }>(db, PG_SERVER_ENCODING_SQL);
  const problem = serverEncodingProblem(rows[0]!.encoding);
  if (problem !== undefined) throw new QueueBoxError(`${prefix}: ${problem}`);
}

/**
 * SQL: `me` (the current role: oid, rolsuper) and `s` (the schema: oid, nspowner, nspname) for a
 * query whose `$1` is the schema name. `s` has no row when the schema does not exist.
 */
export const TRUST_SCOPE = `me AS (SELECT oid, rolsuper FROM pg_roles WHERE rolname = current_user),
     s AS (SELECT oid, nspowner, nspname FROM pg_namespace WHERE nspname = $1)`;

/** SQL: whether the role whose oid is `role` is trusted (see the module comment); needs `me` and `s`. */
export function trustedRole(role: string): string {
  return `(${role} = me.oid
      OR COALESCE((SELECT rolsuper FROM pg_roles WHERE oid = ${role}), false)
      OR pg_has_role(${role}, s.nspowner, 'MEMBER')
      OR (NOT me.rolsuper AND pg_has_role(me.oid, ${role}, 'MEMBER')))`;
}

/**
 * SQL: the reasons QueueBox may not use its schema, one row (`problem`) each. `$1` the schema,
 * `$2` the relation names QueueBox uses, `$3` the table names whose `<table>_…` names are
 * QueueBox's too, `$4` the claim function names of the configuration:
 * - PUBLIC, or a role that is not trusted, holds `CREATE` on the schema (before PostgreSQL 15 the
 *   `public` schema grants it to PUBLIC);
 * - PUBLIC, or a role that is neither trusted nor the database's owner (who owns `public` from
 *   PostgreSQL 15 on), holds `CREATE` on another schema of the session's `search_path`
 *   (`$5`: `current_schemas(false)`, read before the check runs) — its owner included: an operator or function
 *   planted there that matches QueueBox's argument types better than `pg_catalog`'s (such as
 *   `=` on `varchar`) runs in QueueBox's statements;
 * - PUBLIC, or a role that is not trusted, holds `TRIGGER` on one of QueueBox's tables (`GRANT ALL`
 *   includes it), or a trigger on one runs a function whose owner is not trusted: triggers run with
 *   the rights of the role whose write fires them;
 * - row-level security is enabled (or forced) on one of QueueBox's tables: its policies filter what
 *   QueueBox's statements see, so the rows they hide (every row, without a policy, from a role
 *   that does not own the table) are never claimed, reclaimed or counted, and nothing says so;
 * - a table, sequence, index or view of a name QueueBox uses, or a function of a claim function's
 *   name, belongs to a role that is not trusted.
 * A schema that does not exist has no problems (`migrate` creates it).
 */
export const SCHEMA_TRUST_SQL = `WITH ${TRUST_SCOPE},
     public_create AS (SELECT has_schema_privilege('public', s.oid, 'CREATE') AS yes FROM s),
     path AS (SELECT n.oid, n.nspname, has_schema_privilege('public', n.oid, 'CREATE') AS public_create
                FROM pg_namespace n, s WHERE n.nspname = ANY ($5::name[]) AND n.oid <> s.oid),
     tables AS (SELECT c.oid, quote_ident(s.nspname) || '.' || quote_ident(c.relname) AS name, has_table_privilege('public', c.oid, 'TRIGGER') AS public_trigger,
                       c.relrowsecurity AS row_security, c.relforcerowsecurity AS forced_row_security
                  FROM pg_class c, s WHERE c.relnamespace = s.oid AND c.relname = ANY($2::text[]) AND c.relkind IN ('r', 'p'))
     SELECT 'PUBLIC (every role) may CREATE in schema ' || quote_ident(s.nspname) || ': REVOKE CREATE ON SCHEMA ' || quote_ident(s.nspname) || ' FROM PUBLIC' AS problem
       FROM s, public_create WHERE public_create.yes
     UNION ALL
     SELECT * FROM (
       SELECT 'role ' || quote_ident(r.rolname) || ' may CREATE in schema ' || quote_ident(s.nspname) || ': REVOKE CREATE ON SCHEMA ' || quote_ident(s.nspname) || ' FROM ' || quote_ident(r.rolname)
         FROM pg_roles r, s, me, public_create
        WHERE NOT public_create.yes AND has_schema_privilege(r.oid, s.oid, 'CREATE') AND NOT ${trustedRole('r.oid')}
        ORDER BY r.rolname) creators
     UNION ALL
     SELECT * FROM (
       SELECT CASE WHEN r.oid IS NULL THEN 'PUBLIC (every role)' ELSE 'role ' || quote_ident(r.rolname) END
              || ' may CREATE in schema ' || quote_ident(path.nspname) || ', which is on QueueBox''s search_path: REVOKE CREATE ON SCHEMA '
              || quote_ident(path.nspname) || ' FROM ' || COALESCE(quote_ident(r.rolname), 'PUBLIC') || ', or take it off the search_path of QueueBox''s role'
         FROM path CROSS JOIN s CROSS JOIN me LEFT JOIN pg_roles r
           ON NOT path.public_create AND has_schema_privilege(r.oid, path.oid, 'CREATE')
          AND NOT ${trustedRole('r.oid')} AND NOT pg_has_role(r.oid, 'pg_database_owner', 'MEMBER')
        WHERE path.public_create OR r.oid IS NOT NULL
        ORDER BY 1) path_creators
     UNION ALL
     SELECT * FROM (
       SELECT CASE WHEN r.oid IS NULL THEN 'PUBLIC (every role)' ELSE 'role ' || quote_ident(r.rolname) END
              || ' may create triggers on table ' || tables.name || ': REVOKE TRIGGER ON ' || tables.name || ' FROM ' || COALESCE(quote_ident(r.rolname), 'PUBLIC')
         FROM tables CROSS JOIN s CROSS JOIN me LEFT JOIN pg_roles r
           ON NOT tables.public_trigger AND has_table_privilege(r.oid, tables.oid, 'TRIGGER') AND NOT ${trustedRole('r.oid')}
        WHERE tables.public_trigger OR r.oid IS NOT NULL
        UNION ALL
       SELECT 'trigger ' || quote_ident(t.tgname) || ' on table ' || tables.name || ' runs function ' || quote_ident(fn.nspname) || '.' || quote_ident(p.proname)
              || '() of role ' || quote_ident(pg_get_userbyid(p.proowner)) || ', not QueueBox''s: DROP TRIGGER ' || quote_ident(t.tgname) || ' ON ' || tables.name
         FROM pg_trigger t JOIN tables ON tables.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid JOIN pg_namespace fn ON fn.oid = p.pronamespace, s, me
        WHERE NOT ${trustedRole('p.proowner')}
        ORDER BY 1) triggers
     UNION ALL
     SELECT * FROM (
       SELECT 'row-level security is ' || CASE WHEN tables.row_security AND tables.forced_row_security THEN 'enabled and forced'
                                                WHEN tables.row_security THEN 'enabled' ELSE 'forced' END
              || ' on table ' || tables.name || ': its policies decide which rows QueueBox may see (none, for a role that does not own the table, when there is no policy), and a row they hide is never claimed, silently: '
              || CASE WHEN tables.row_security THEN 'ALTER TABLE ' || tables.name || ' DISABLE ROW LEVEL SECURITY' ELSE '' END
              || CASE WHEN tables.row_security AND tables.forced_row_security THEN '; ' ELSE '' END
              || CASE WHEN tables.forced_row_security THEN 'ALTER TABLE ' || tables.name || ' NO FORCE ROW LEVEL SECURITY' ELSE '' END
         FROM tables
        WHERE tables.row_security OR tables.forced_row_security
        ORDER BY 1) row_security
     UNION ALL
     SELECT * FROM (
       SELECT CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'i' THEN 'index' WHEN 'v' THEN 'view' ELSE 'table' END
              || ' ' || quote_ident(s.nspname) || '.' || quote_ident(c.relname) || ' belongs to role ' || quote_ident(pg_get_userbyid(c.relowner))
              || ', not to QueueBox: QueueBox does not adopt it (drop it, or use another schema)'
         FROM pg_class c, s, me
        WHERE c.relnamespace = s.oid
          AND (c.relname = ANY($2::text[]) OR EXISTS (SELECT 1 FROM unnest($3::text[]) t WHERE starts_with(c.relname, t || '_')))
          AND NOT ${trustedRole('c.relowner')}
        UNION ALL
       SELECT 'function ' || p.oid::regprocedure::text || ' belongs to role ' || quote_ident(pg_get_userbyid(p.proowner))
              || ', not to QueueBox: it is never called, and migrate neither keeps nor replaces it (drop it as its owner or a superuser)'
         FROM pg_proc p, s, me
        WHERE p.pronamespace = s.oid AND p.proname = ANY($4::text[]) AND NOT ${trustedRole('p.proowner')}
        ORDER BY 1) foreign_objects`;

/**
 * SQL: the schemas the session's `search_path` puts before `pg_catalog` (`schema`, in order;
 * temporary schemas aside). A function or operator in one of them stands in for PostgreSQL's own in
 * every unqualified call, `SCHEMA_TRUST_SQL`'s included: so this runs first, and alone, and names
 * every function it calls and casts to with `pg_catalog.` (it calls no operator).
 */
export const PATH_BEFORE_CATALOG_SQL = `SELECT x.n::pg_catalog.text AS schema
  FROM pg_catalog.unnest((pg_catalog.current_schemas(true))[1:pg_catalog.int4mi(pg_catalog.array_position(pg_catalog.current_schemas(true), 'pg_catalog'::pg_catalog.name), 1)]) WITH ORDINALITY AS x(n, i)
 WHERE NOT pg_catalog.starts_with(x.n::pg_catalog.text, 'pg_temp_')
 ORDER BY x.i`;

/** Runs `PATH_BEFORE_CATALOG_SQL`: the schemas before `pg_catalog`, none when it is first. */
export async function pgPathBeforeCatalog(db: PgQueryable): Promise<string[]> {
  return (await pgQuery<{ schema: string }>(db, PATH_BEFORE_CATALOG_SQL, [])).rows.map((r) => r.schema);
}

/** The refusal of schemas `PATH_BEFORE_CATALOG_SQL` found. */
export function pathBeforeCatalogProblem(schemas: readonly string[]): string {
  return `the search_path puts ${schemas.map((s) => `schema ${JSON.stringify(s)}`).join(', ')} before pg_catalog: a function or operator there would stand in for PostgreSQL's own in QueueBox's statements, with their rights; put pg_catalog first in the search_path of QueueBox's role or connection, or leave it out (PostgreSQL then searches it first)`;
}

/** The values of `SCHEMA_TRUST_SQL`'s parameters `$1`–`$4` for these names and claim function names (`$5`, the search_path, is read when it runs). */
export function schemaTrustValues(names: PgNames, functionNames: readonly string[]): [string, string[], string[], string[]] {
  const tables = [names.outboxTable, names.inboxTable, names.maintenanceTable];
  return [names.schema, [...tables, 'queuebox_migrations'], tables, [...functionNames]];
}

/** The schemas of the session's `search_path` (`current_schemas(false)`), as JSON (one qualified call). */
export const SESSION_PATH_SQL = `SELECT pg_catalog.to_json(pg_catalog.current_schemas(false)) AS path`;

/** Pins the `search_path` to `pg_catalog, pg_temp` for the rest of the transaction. */
export const PIN_CATALOG_PATH_SQL = `SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)`;

/**
 * Runs `work` with the `search_path` pinned to `pg_catalog, pg_temp`, so that nothing planted in a
 * schema of the session's path — a function whose argument types match better than
 * `pg_catalog`'s, such as a `quote_ident(name)` in `public` — runs in the check: on a pool in a
 * transaction of its own (transaction-scoped, so safe behind a transaction pooler); on a client
 * (inside `migrate`'s transaction) until `work` ends, the session's path then put back.
 */
async function withCatalogPath<T>(db: PgQueryable, work: (db: PgQueryable) => Promise<T>): Promise<T> {
  if (isPgPool(db)) {
    return pgTransaction(db, async (client) => {
      await pgQuery(client, PIN_CATALOG_PATH_SQL, []);
      return work(client);
    });
  }
  const { rows } = await pgQuery<{ path: string }>(db, `SELECT pg_catalog.current_setting('search_path') AS path`, []);
  await pgQuery(db, PIN_CATALOG_PATH_SQL, []);
  try {
    return await work(db);
  } finally {
    // A failed statement aborted the transaction, which puts the path back itself.
    await pgQuery(db, `SELECT pg_catalog.set_config('search_path', $1, true)`, [rows[0]!.path]).catch(() => undefined);
  }
}

/**
 * Runs `PATH_BEFORE_CATALOG_SQL`, then (when the search_path puts nothing before `pg_catalog`)
 * `SCHEMA_TRUST_SQL`: the problems, none when QueueBox may use the schema.
 */
export async function pgSchemaTrustProblems(db: PgQueryable, names: PgNames, functionNames: readonly string[] = []): Promise<string[]> {
  const before = await pgPathBeforeCatalog(db);
  if (before.length > 0) return [pathBeforeCatalogProblem(before)];
  const { rows: session } = await pgQuery<{ path: string[] }>(db, SESSION_PATH_SQL, []);
  const { rows } = await withCatalogPath(db, (pinned) => pgQuery<{ problem: string }>(pinned, SCHEMA_TRUST_SQL, [...schemaTrustValues(names, functionNames), session[0]!.path]));
  return rows.map((r) => r.problem);
}
