/**
 * The object names QueueBox derives from the configured table names (`tables.*`), read from the
 * migrations themselves, and the choices of table names under which two of QueueBox's objects
 * would get one name.
 *
 * PostgreSQL keeps one relation of a name per schema (tables, indexes — those of primary keys and
 * unique constraints included — and sequences share `pg_class`); SQL Server one object of a name
 * (tables, sequences and constraints share `sys.objects`). Every migration statement is guarded by
 * its name (`CREATE … IF NOT EXISTS`, `OBJECT_ID`, `sys.indexes`), so the second object of a name
 * is skipped without a word — `tables.inbox: app` with `tables.outbox: app_push` left the inbox
 * without `app_push_pending_idx`, the outbox's index of that name taking its place — or a later
 * migration drops the other table's object (`DROP INDEX IF EXISTS`). A table named like one of
 * QueueBox's own objects (`queuebox_migrations`, another table's `outbox_pending_idx`) is either
 * never created or taken for that object.
 *
 * The names, for each table: every identifier of the PostgreSQL and SQL Server migrations that is
 * the table's name plus a suffix (indexes, dropped ones too; named constraints; the sequence), the
 * primary key PostgreSQL names `<table>_pkey` by itself, and the claim functions of the outbox
 * (`<outbox>_claim_<digest>`, `claim-functions.ts`); and, whatever the tables are called, the
 * bookkeeping table `queuebox_migrations` and its primary key. One flat namespace is checked for
 * both databases: a configuration may move from one to the other, and a name that is safe on one
 * only is not worth keeping. (QueueBox creates no triggers. Its lock keys — PostgreSQL advisory
 * locks, SQL Server application locks — and the maintenance rows keyed on a table embed the whole
 * table name with a fixed prefix per purpose, so distinct tables have distinct keys.)
 *
 * Computed on first use, not at import: this module is reached from the config schema, which the
 * migrations' name quoting imports in turn.
 */
import { claimFunctionName } from './postgres/claim-functions.ts';
import { pgMigrations } from './postgres/migrations.ts';
import { pgNames } from './postgres/names.ts';
import { mssqlMigrations } from './sqlserver/migrations.ts';
import { mssqlNames } from './sqlserver/names.ts';

export type TableKey = 'outbox' | 'inbox' | 'maintenance';

const TABLE_KEYS: readonly TableKey[] = ['outbox', 'inbox', 'maintenance'];

/** What QueueBox names after the tables, as suffixes; and what it names the same whatever they are. */
export interface DerivedNameRules {
  /** Per table key: the suffixes its objects add to the table's name (`_pending_idx`…), sorted. */
  suffixes: Record<TableKey, readonly string[]>;
  /** Claim functions: `<table of key><prefix><digits hex digits>`. */
  functions: ReadonlyArray<{ key: TableKey; prefix: string; digits: number }>;
  /** Names of QueueBox's own objects whatever the tables are called (`queuebox_migrations`…). */
  fixed: readonly string[];
}

/** Placeholders no migration text contains otherwise (the identifiers are lower case). */
const PLACEHOLDER: Record<TableKey, string> = { outbox: 'qbplaceholderoutbox', inbox: 'qbplaceholderinbox', maintenance: 'qbplaceholdermaintenance' };
const PLACEHOLDER_SCHEMA = 'qbplaceholderschema';

let rules: DerivedNameRules | undefined;

/** The rules, read from the migrations once. */
export function derivedNameRules(): DerivedNameRules {
  if (rules !== undefined) return rules;
  const texts = [
    ...pgMigrations.map((m) => m.sql(pgNames(PLACEHOLDER_SCHEMA, PLACEHOLDER))),
    ...mssqlMigrations.flatMap((m) => m.statements(mssqlNames(PLACEHOLDER_SCHEMA, PLACEHOLDER))),
  ];
  // PostgreSQL names an unnamed primary key `<table>_pkey` (every QueueBox table has one).
  const suffixes: Record<TableKey, Set<string>> = { outbox: new Set(['_pkey']), inbox: new Set(['_pkey']), maintenance: new Set(['_pkey']) };
  for (const text of texts) {
    for (const [token] of text.matchAll(/[a-z0-9_]+/g)) {
      for (const key of TABLE_KEYS) if (token.startsWith(`${PLACEHOLDER[key]}_`)) suffixes[key].add(token.slice(PLACEHOLDER[key].length));
    }
  }
  // The claim functions are the outbox's (each ClaimStatement's table is `outboxTable`): `<table>_claim_<digest>`.
  const fn = claimFunctionName({ table: PLACEHOLDER.outbox, text: '', params: [], returns: '' }).slice(PLACEHOLDER.outbox.length);
  const prefix = fn.replace(/[0-9a-f]+$/, '');
  const migrations = [pgNames(PLACEHOLDER_SCHEMA, PLACEHOLDER).migrations, mssqlNames(PLACEHOLDER_SCHEMA, PLACEHOLDER).migrations].map((q) => q.match(/[a-z0-9_]+/g)!.at(-1)!);
  rules = {
    suffixes: { outbox: [...suffixes.outbox].sort(), inbox: [...suffixes.inbox].sort(), maintenance: [...suffixes.maintenance].sort() },
    functions: [{ key: 'outbox', prefix, digits: fn.length - prefix.length }],
    fixed: [...new Set(migrations.flatMap((name) => [name, `${name}_pkey`]))],
  };
  return rules;
}

/** One of QueueBox's object names and what it names. */
interface Derived {
  /** Owner: a table key, or `undefined` for QueueBox's own names. */
  key: TableKey | undefined;
  name: string;
  /** For a family of names (the claim functions): what matches it. */
  pattern?: RegExp;
  what: string;
}

/** Two of QueueBox's objects that one configuration would give the same name. */
export interface NameCollision {
  /** The key to change: the longer table name (it is the other's extended), or the one QueueBox's own name took. */
  key: TableKey;
  /** The other key, or `undefined` when the name is QueueBox's own (`queuebox_migrations`…). */
  other: TableKey | undefined;
  /** Each shared name, with what it names on either side (`an index of tables.outbox`). */
  names: Array<{ name: string; mine: string; theirs: string }>;
}

function kind(suffix: string): string {
  if (suffix.endsWith('_idx')) return 'an index';
  if (suffix.endsWith('_seq')) return 'the sequence';
  if (suffix.endsWith('_pkey')) return 'the primary key';
  return 'a constraint';
}

function derivedOf(key: TableKey, table: string, r: DerivedNameRules): Derived[] {
  const out: Derived[] = [{ key, name: table, what: `the table tables.${key}` }];
  for (const suffix of r.suffixes[key]) out.push({ key, name: `${table}${suffix}`, what: `${kind(suffix)} of tables.${key}` });
  for (const f of r.functions.filter((fn) => fn.key === key)) {
    out.push({ key, name: `${table}${f.prefix}<${f.digits} hex digits>`, pattern: new RegExp(`^${table}${f.prefix}[0-9a-f]{${f.digits}}$`), what: `a claim function of tables.${key}` });
  }
  return out;
}

function same(a: Derived, b: Derived): string | undefined {
  if (a.pattern === undefined && b.pattern === undefined) return a.name === b.name ? a.name : undefined;
  if (a.pattern !== undefined && b.pattern !== undefined) return undefined; // one family only (the outbox's claim functions)
  const [pattern, literal] = a.pattern !== undefined ? [a, b] : [b, a];
  return pattern.pattern!.test(literal.name) ? literal.name : undefined;
}

/**
 * Every pair of QueueBox's objects that `tables` would give one name, grouped by the two keys
 * (none: every name distinct). Keys naming the same table are left out (refused on their own).
 */
export function tableNameCollisions(tables: Record<TableKey, string>): NameCollision[] {
  const r = derivedNameRules();
  const all: Derived[] = [
    ...r.fixed.map((name) => ({ key: undefined, name, what: name.endsWith('_pkey') ? "the primary key of QueueBox's bookkeeping table" : "QueueBox's bookkeeping table" })),
    ...TABLE_KEYS.flatMap((key) => derivedOf(key, tables[key], r)),
  ];
  const found = new Map<string, NameCollision>();
  for (const [i, a] of all.entries()) {
    for (const b of all.slice(i + 1)) {
      if (a.key === b.key || (a.key !== undefined && b.key !== undefined && tables[a.key] === tables[b.key])) continue;
      const name = same(a, b);
      if (name === undefined) continue;
      // Blame the key whose table name extends the other's (o + so === i + si: the longer one), or the one that took QueueBox's own name.
      const [mine, theirs] = b.key === undefined || (a.key !== undefined && tables[a.key].length > tables[b.key!].length) ? [a, b] : [b, a];
      const id = `${mine.key}:${theirs.key ?? ''}`;
      const entry = found.get(id) ?? { key: mine.key!, other: theirs.key, names: [] };
      entry.names.push({ name, mine: mine.what, theirs: theirs.what });
      found.set(id, entry);
    }
  }
  return [...found.values()];
}
