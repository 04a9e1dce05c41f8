/**
 * The only reader of the configuration file and of `QUEUEBOX_*` environment variables.
 *
 * Precedence: schema defaults < YAML file (`QUEUEBOX_CONFIG` or the given path) < environment.
 * The file is YAML 1.2 with YAML 1.1 merge keys (`<<: *anchor`, `<<: [*a, *b]`): keys written
 * next to a merge key win over the merged ones, and a key written twice is still an error.
 *
 * An environment override names a key path in SCREAMING_SNAKE case with `__` between levels:
 * `QUEUEBOX_OUTBOX__BATCH_SIZE=50` sets `outbox.batchSize`. The path is matched against the
 * schema: a key of QueueBox's own is its camelCase (`BATCH_SIZE` → `batchSize`); a name you chose
 * (a source under `inbox.sources`, a destination under `destinations`) is matched to the names in
 * the file case-insensitively, underscores kept and a `-` matched by `_` (`PARTNER_ORDERS` →
 * `partner_orders`), and is taken in lower case when the file has no such name.
 *
 * The value of an override is one value, never a YAML document, typed by the key it sets: a
 * string key takes the text verbatim (`orders #2`, `2024`, `a: b`); a number key takes a decimal
 * number (`50`, `0.5`, `1e3`; spaces around it ignored) and a boolean key `true` or `false` (any
 * case), anything else is refused naming the key; a mapping or a list cannot be set from the
 * environment. An error at a key an override set (or inside a mapping it created) names the
 * variable: `outbox.batchSiz (from QUEUEBOX_OUTBOX__BATCH_SIZ): unknown key`.
 *
 * `QUEUEBOX_DATABASE_URL` (and `DATABASE_URL`) set `database.url` when the file sets neither
 * `url` nor `urlEnv`. `POWERTOOLS_LOG_LEVEL` (any case) sets `observability.logLevel` over the
 * file, as Powertools users expect; a `QUEUEBOX_OBSERVABILITY__LOG_LEVEL` override still wins
 * over it.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml, YAMLError } from 'yaml';
import type { z } from 'zod';
import { ConfigError, type ConfigIssue } from '../errors.ts';
import { looksLikeSecret, shownVariable } from './looks-like-secret.ts';
import { configSchema, LOG_LEVELS, type ConfigInput, type QueueBoxConfig } from './schema.ts';

type Env = Readonly<Record<string, string | undefined>>;

/** Environment variables with the prefix that are not key overrides. */
const RESERVED_ENV = new Set([
  'QUEUEBOX_CONFIG',
  'QUEUEBOX_DATABASE_URL',
  'QUEUEBOX_MSSQL_URL',
  'QUEUEBOX_FAULTS_SEED',
  // Where secrets are (lib/runtime/secrets.ts), not configuration keys.
  'QUEUEBOX_DATABASE_SECRET_ID',
  'QUEUEBOX_DATABASE_URL_PARAMETER',
  'QUEUEBOX_SECRETS_PARAMETER_PATH',
]);

const OVERRIDE_PREFIX = 'QUEUEBOX_';

/** YAML 1.2 plus YAML 1.1 merge keys (`<<: *anchor`); duplicate keys stay errors (the parser's default). */
const YAML_OPTIONS = { merge: true } as const;

export interface LoadConfigOptions {
  /**
   * Path of the YAML file; defaults to `QUEUEBOX_CONFIG`, else no file. An empty path is refused
   * (an unset shell variable, `--config "$CFG"`): it would otherwise run with no file, ignoring
   * `QUEUEBOX_CONFIG`. An empty `QUEUEBOX_CONFIG` is no file, as unset (the CLI refuses it).
   */
  path?: string;
  /** Parsed configuration to use instead of a file (tests, embedding). */
  input?: ConfigInput;
  /** Environment to read; defaults to `process.env`. */
  env?: Env;
}

/** Loads, merges and validates configuration; throws `ConfigError` naming every bad key. */
export function loadConfig(options: LoadConfigOptions = {}): QueueBoxConfig {
  const env = options.env ?? process.env;
  let raw: unknown = options.input ?? {};
  if (options.input === undefined && options.path === '') {
    throw new ConfigError([{ key: '(file)', message: 'the path of the configuration file is empty: give the path of the file, or no path to read QUEUEBOX_CONFIG' }]);
  }
  const path = options.path ?? env.QUEUEBOX_CONFIG;
  if (options.input === undefined && path !== undefined && path !== '') {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (error) {
      throw new ConfigError([{ key: '(file)', message: `cannot read ${path}: ${(error as Error).message}` }]);
    }
    try {
      raw = parseYaml(text, YAML_OPTIONS) ?? {};
    } catch (error) {
      throw new ConfigError([{ key: '(file)', message: `${path} is not valid YAML: ${yamlProblem(error)}` }]);
    }
  }
  if (!isPlainObject(raw)) {
    throw new ConfigError([{ key: '(root)', message: 'must be a mapping of keys to values' }]);
  }
  const merged = structuredClone(raw);
  const origins = applyEnvOverrides(merged, env);
  return validate(merged, origins);
}

/** Validates an already merged object; throws `ConfigError`. */
export function parseConfig(input: unknown): QueueBoxConfig {
  return validate(input, new Origins());
}

function validate(input: unknown, origins: Origins): QueueBoxConfig {
  const result = configSchema.safeParse(input);
  if (!result.success) {
    throw new ConfigError(result.error.issues.flatMap((issue) => toIssues(issue, input)).map((issue) => origins.annotate(issue)));
  }
  return result.data;
}

function toIssues(issue: z.core.$ZodIssue, input: unknown): ConfigIssue[] {
  const path = issue.path.map(String);
  if (issue.code === 'unrecognized_keys') {
    return issue.keys.map((key) => ({ key: [...path, key].join('.'), message: 'unknown key' }));
  }
  if (issue.code === 'invalid_key') {
    // A name of a record (a source, a destination): the name's own rule, the name quoted (it may
    // hold a dot, which the key path would hide).
    const name = path.at(-1) ?? '';
    const rules = issue.issues.map((i) => i.message).join('; ');
    return [{ key: path.join('.'), message: `the name ${JSON.stringify(name)} is not valid: ${rules}` }];
  }
  // YAML 1.1's booleans (`yes`, `on`, `off`) are strings in YAML 1.2, which the file is read as.
  if (issue.code === 'invalid_type' && issue.expected === 'boolean') {
    const given = issue.path.reduce<unknown>((node, key) => (isPlainObject(node) ? node[String(key)] : undefined), input);
    if (typeof given === 'string' && /^(y|yes|n|no|on|off)$/i.test(given)) {
      return [{ key: path.join('.'), message: `${issue.message} (${JSON.stringify(given)}: write true or false; YAML 1.2, which the file is read as, has no other booleans)` }];
    }
  }
  return [{ key: path.length === 0 ? '(root)' : path.join('.'), message: issue.message }];
}

/**
 * The key paths environment variables set, for messages: a key an override set, and every
 * mapping an override created (what is in it came from the environment).
 */
class Origins {
  private readonly byPath = new Map<string, string[]>();

  add(path: readonly string[], variable: string): void {
    const key = path.join('.');
    const variables = this.byPath.get(key) ?? [];
    if (!variables.includes(variable)) variables.push(variable);
    this.byPath.set(key, variables);
  }

  /** `issue` naming the variable(s) behind its key: the longest recorded path that is the key or holds it. */
  annotate(issue: ConfigIssue): ConfigIssue {
    let best: string | undefined;
    for (const path of this.byPath.keys()) {
      if ((issue.key === path || issue.key.startsWith(`${path}.`)) && (best === undefined || path.length > best.length)) best = path;
    }
    return best === undefined ? issue : { ...issue, variable: this.byPath.get(best)!.join(', ') };
  }
}

/** The parts of a zod schema the override walk reads (`_zod.def`, as in infra/reference-docs.ts). */
interface SchemaNode {
  _zod: { def: Record<string, unknown> & { type: string } };
}

/** `schema` without its default, prefault, optional and pipe wrappers: the type a value must have. */
function unwrap(schema: SchemaNode | undefined): SchemaNode | undefined {
  let node = schema;
  for (;;) {
    const def = node?._zod.def;
    if (def === undefined) return undefined;
    if (def.type === 'default' || def.type === 'prefault' || def.type === 'optional' || def.type === 'nullable' || def.type === 'readonly') node = def.innerType as SchemaNode;
    else if (def.type === 'pipe') node = def.in as SchemaNode;
    else return node;
  }
}

/** True for a schema whose values are mappings or lists (objects, records, arrays, unions of objects). */
function isContainer(schema: SchemaNode | undefined): false | 'a mapping' | 'a list' {
  const def = unwrap(schema)?._zod.def;
  if (def === undefined) return false;
  if (def.type === 'array' || def.type === 'tuple') return 'a list';
  if (def.type === 'object' || def.type === 'record') return 'a mapping';
  if (def.type === 'union') return (def.options as SchemaNode[]).some((option) => isContainer(option) === 'a mapping') ? 'a mapping' : false;
  return false;
}

/** The object shapes a value of `schema` may have: one for an object, the variant(s) for a union of objects (by `type` when `value` names one). */
function shapesOf(schema: SchemaNode | undefined, value: Record<string, unknown>): Array<Record<string, SchemaNode>> {
  const def = unwrap(schema)?._zod.def;
  if (def?.type === 'object') return [def.shape as Record<string, SchemaNode>];
  if (def?.type !== 'union') return [];
  const shapes = (def.options as SchemaNode[]).flatMap((option) => shapesOf(option, value));
  const chosen = shapes.filter((shape) => {
    const literal = unwrap(shape.type)?._zod.def;
    return literal?.type === 'literal' && (literal.values as unknown[]).includes(value.type);
  });
  return chosen.length > 0 ? chosen : shapes;
}

interface Step {
  key: string;
  schema: SchemaNode | undefined;
}

/**
 * The key one segment of an override names inside `node` (whose schema is `schema`): a record's
 * key matches a name already there case-insensitively (underscores kept, a `-` matched by `_`),
 * and a name the file does not have is refused; an object's key is the segment in camelCase.
 */
function step(segment: string, schema: SchemaNode | undefined, node: Record<string, unknown>, at: readonly string[], variable: string): Step {
  const def = unwrap(schema)?._zod.def;
  if (def?.type === 'record') {
    const names = Object.keys(node).filter((name) => name.toUpperCase().replaceAll('-', '_') === segment.toUpperCase());
    if (names.length > 1) {
      throw new ConfigError([{ key: [...at, segment.toLowerCase()].join('.'), variable, message: `matches ${names.join(' and ')}, which differ only in case or in - and _: rename one to set it from the environment` }]);
    }
    if (names.length === 0) {
      // A name the file does not have: an override sets a key of an entry, never makes one (a
      // mistyped name would otherwise start a new source or destination from a few variables).
      const there = Object.keys(node);
      throw new ConfigError([
        {
          key: [...at, segment.toLowerCase()].join('.'),
          variable,
          message: `no entry "${segment.toLowerCase()}" in the file's ${at.join('.') || 'configuration'} (${there.length === 0 ? 'it has none' : `it has ${there.join(', ')}`}): an environment variable sets a key of an entry the file has; add new entries in the file`,
        },
      ]);
    }
    return { key: names[0]!, schema: def.valueType as SchemaNode };
  }
  if (def?.type === 'array' || def?.type === 'tuple') {
    throw new ConfigError([{ key: at.join('.'), variable, message: 'is a list: its items cannot be set from environment variables (set them in the file)' }]);
  }
  const key = camelCase(segment);
  const shape = shapesOf(schema, node).find((candidate) => Object.hasOwn(candidate, key));
  return { key, schema: shape?.[key] };
}

/** The value of an override for a key of `schema`: the text, or a number or boolean for such keys (left as text when it is not one, so the key's check refuses it). */
function overrideValue(text: string, schema: SchemaNode | undefined, at: readonly string[], variable: string): unknown {
  const container = isContainer(schema);
  if (container !== false) {
    throw new ConfigError([{ key: at.join('.'), variable, message: `is ${container}: an environment variable sets one value (a string, number or boolean); set it in the file` }]);
  }
  const type = unwrap(schema)?._zod.def.type;
  const trimmed = text.trim();
  if (type === 'number' && /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/.test(trimmed)) return Number(trimmed);
  if (type === 'boolean' && /^(true|false)$/i.test(trimmed)) return trimmed.toLowerCase() === 'true';
  return text;
}

function applyEnvOverrides(target: Record<string, unknown>, env: Env): Origins {
  const origins = new Origins();
  // An empty QUEUEBOX_DATABASE_URL (`QUEUEBOX_DATABASE_URL= …`, an unset shell variable exported
  // as empty) is unset: it does not hide DATABASE_URL.
  const databaseUrlVariable = env.QUEUEBOX_DATABASE_URL !== undefined && env.QUEUEBOX_DATABASE_URL !== '' ? 'QUEUEBOX_DATABASE_URL' : 'DATABASE_URL';
  const databaseUrl = env[databaseUrlVariable];
  if (databaseUrl !== undefined && databaseUrl !== '') {
    const database = (target.database ??= {}) as Record<string, unknown>;
    if (isPlainObject(database) && database.url === undefined && database.urlEnv === undefined) {
      database.url = databaseUrl;
      origins.add(['database', 'url'], databaseUrlVariable);
    }
  }
  if (applyPowertoolsLogLevel(target, env.POWERTOOLS_LOG_LEVEL)) origins.add(['observability', 'logLevel'], 'POWERTOOLS_LOG_LEVEL');
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith(OVERRIDE_PREFIX) || RESERVED_ENV.has(name) || value === undefined) continue;
    const segments = name.slice(OVERRIDE_PREFIX.length).split('__');
    if (segments.some((segment) => !/^[A-Za-z0-9]+(_[A-Za-z0-9]+)*$/.test(segment))) {
      throw new ConfigError([{ key: name, message: 'is not a valid override name (use QUEUEBOX_SECTION__KEY_NAME)' }]);
    }
    let node: Record<string, unknown> = target;
    let schema: SchemaNode | undefined = configSchema as unknown as SchemaNode;
    const path: string[] = [];
    for (const [index, segment] of segments.entries()) {
      const next = step(segment, schema, node, path, name);
      path.push(next.key);
      if (index === segments.length - 1) {
        node[next.key] = overrideValue(value, next.schema, path, name);
        origins.add(path, name);
        break;
      }
      const child = node[next.key];
      if (child === undefined) {
        node[next.key] = {};
        origins.add(path, name);
      } else if (!isPlainObject(child)) {
        throw new ConfigError([{ key: path.join('.'), variable: name, message: 'is not a mapping in the file, so no key below it can be set' }]);
      }
      node = node[next.key] as Record<string, unknown>;
      schema = next.schema;
    }
  }
  return origins;
}

/**
 * A YAML error as its position and kind only: the parser's own message quotes the offending line,
 * which may hold a password, so that excerpt is never shown.
 */
function yamlProblem(error: unknown): string {
  if (!(error instanceof YAMLError)) return 'the file could not be parsed';
  const kind = error.message.split(' at line ')[0]!.split(':\n')[0]!;
  const at = error.linePos?.[0];
  return `${at ? `line ${at.line}, column ${at.col}: ` : ''}${kind} (${error.code})`;
}

/** `POWERTOOLS_LOG_LEVEL` → `observability.logLevel`; an unknown level stops start-up naming the variable. */
function applyPowertoolsLogLevel(target: Record<string, unknown>, value: string | undefined): boolean {
  if (value === undefined || value.trim() === '') return false;
  const level = value.trim().toUpperCase();
  if (!(LOG_LEVELS as readonly string[]).includes(level)) {
    throw new ConfigError([{ key: 'POWERTOOLS_LOG_LEVEL', message: `is "${value}"; expected one of ${LOG_LEVELS.join(', ')}` }]);
  }
  const observability = (target.observability ??= {});
  if (!isPlainObject(observability)) throw new ConfigError([{ key: 'observability', message: 'must be a mapping of keys to values' }]);
  observability.logLevel = level;
  return true;
}

function camelCase(segment: string): string {
  return segment.toLowerCase().replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Resolves a secret named by an `…Env` key; throws `ConfigError` naming `key` when it is unset
 * (the variable is named only when its name has the shape of one: `shownVariable`).
 */
export function requireSecret(env: Env, variable: string, key: string): string {
  const value = env[variable];
  if (looksLikeSecret(variable)) throw new ConfigError([{ key, message: 'holds what looks like a secret, not the name of an environment variable (not shown)' }]);
  if (value === undefined || value === '') {
    throw new ConfigError([{ key, message: `names ${shownVariable(variable)}, which is not set` }]);
  }
  return value;
}
