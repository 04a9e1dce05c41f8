/**
 * Checks that span several keys of a parsed configuration, run when it loads so that a mistake
 * stops start-up instead of failing messages later: duplicate HTTP paths and SQS queue names,
 * every JSONPath, every topic template, auth on every HTTP source, and table names that stay
 * valid identifiers once QueueBox adds its suffixes and under which no two of QueueBox's objects
 * share a name (`lib/db/derived-names.ts`).
 */
import { tableNameCollisions, type NameCollision } from '../db/derived-names.ts';
import { jsonPathProblem } from './json-path-syntax.ts';

/** The longest suffix QueueBox appends to a table name (an index name); a derived name must fit in 63 characters. */
export const LONGEST_DERIVED_SUFFIX = '_aggregate_processing_idx';
/** Longest table name whose derived names stay within PostgreSQL's 63-character identifiers. */
export const MAX_TABLE_NAME_LENGTH = 63 - LONGEST_DERIVED_SUFFIX.length;

const PATH_KEYS = ['idempotencyKeyPath', 'eventTypePath', 'aggregateIdPath', 'correlationIdPath', 'delayPath'] as const;
const PLACEHOLDER = /\{\{\s*([A-Za-z]+)\s*\}\}/g;
const KNOWN_PLACEHOLDERS = new Set(['source', 'eventType']);

interface CheckedConfig {
  tables: Record<'outbox' | 'inbox' | 'maintenance', string>;
  inbox: {
    basePath: string;
    topicTemplate: string;
    sources: Record<
      string,
      {
        type: 'http' | 'sqs';
        path?: string | undefined;
        queueName?: string | undefined;
        auth?: { type: string } | undefined;
        topicTemplate?: string | undefined;
        idempotencyKeyHeader?: string | undefined;
        idempotency?: string | undefined;
      } & Partial<Record<(typeof PATH_KEYS)[number], string>>
    >;
  };
}

/** One problem: the key path and the message (never the value of a secret). */
export interface CrossCheckIssue {
  path: Array<string | number>;
  message: string;
}

/** Every cross-key problem of `config`; empty when there is none. */
export function crossCheckConfig(config: CheckedConfig): CrossCheckIssue[] {
  const issues: CrossCheckIssue[] = [];
  const paths = new Map<string, string>();
  const queues = new Map<string, string>();
  checkTemplate(config.inbox.topicTemplate, ['inbox', 'topicTemplate'], issues);
  for (const [name, source] of Object.entries(config.inbox.sources)) {
    const at = (key: string) => ['inbox', 'sources', name, key];
    if (source.type === 'http') {
      if (source.auth === undefined) {
        issues.push({ path: at('auth'), message: 'is required for an http source: hmac, stripe, github, bearer or api-key (or `type: none` to accept unauthenticated requests)' });
      }
      if (source.path !== undefined) {
        const route = `${config.inbox.basePath}${source.path}`;
        const other = paths.get(route);
        if (other !== undefined) issues.push({ path: at('path'), message: `POST ${route} is already the path of source ${other}: every http source needs its own path` });
        else paths.set(route, name);
      }
    } else {
      const queue = source.queueName ?? name;
      const other = queues.get(queue);
      if (other !== undefined) issues.push({ path: at('queueName'), message: `queue ${queue} is already received by source ${other}: every sqs source needs its own queue` });
      else queues.set(queue, name);
    }
    for (const key of PATH_KEYS) {
      const path = source[key];
      const problem = path === undefined ? undefined : jsonPathProblem(path);
      if (problem !== undefined) issues.push({ path: at(key), message: problem });
    }
    if (source.topicTemplate !== undefined) checkTemplate(source.topicTemplate, at('topicTemplate'), issues);
    checkIdempotency(source, at, issues);
  }
  for (const [key, table] of Object.entries(config.tables)) {
    if (table.length > MAX_TABLE_NAME_LENGTH) {
      issues.push({
        path: ['tables', key],
        message: `must be at most ${MAX_TABLE_NAME_LENGTH} characters: QueueBox derives index names such as ${table}${LONGEST_DERIVED_SUFFIX}, which must fit in 63`,
      });
    }
  }
  for (const collision of tableNameCollisions(config.tables)) issues.push({ path: ['tables', collision.key], message: collisionMessage(config.tables, collision) });
  return issues;
}

/**
 * Two of QueueBox's objects under one name: a schema holds one object of a name, and every
 * migration statement is guarded by its name, so `migrate` would skip the second one and report
 * success (the relay claim then read the whole inbox without its index), or drop or take the
 * other's object.
 */
function collisionMessage(tables: CheckedConfig['tables'], c: NameCollision): string {
  const table = tables[c.key];
  const names = c.names.map((n) => `${n.name} (${n.mine} and ${n.theirs})`).join(', ');
  const opening =
    c.other === undefined ? `${table} is a name QueueBox gives its own objects: ${names}` : `${table} and tables.${c.other} ${tables[c.other]} give two of QueueBox's objects one name: ${names}`;
  return `${opening}. A schema holds one object of a name and migrate creates each only while its name is free: it would skip one of them without a word, or fail. Choose table names none of which is another one followed by _… (QueueBox appends _pending_idx, _push_pending_idx, _pkey and the like) nor one of QueueBox's own (queuebox_migrations)`;
}

/**
 * Every source says how deliveries are told apart: one of `idempotencyKeyPath`,
 * `idempotencyKeyHeader` or `idempotency`. A generic `hmac` source has no default (keying on the
 * body would answer a later identical body `duplicate` and never store it); the presets, the
 * unsigned schemes and SQS sources have a documented one (lib/inbox/idempotency-choice.ts).
 */
function checkIdempotency(source: CheckedConfig['inbox']['sources'][string], at: (key: string) => string[], issues: CrossCheckIssue[]): void {
  const chosen = (['idempotencyKeyPath', 'idempotencyKeyHeader', 'idempotency'] as const).filter((key) => source[key] !== undefined);
  if (source.type === 'sqs') {
    for (const key of chosen.filter((k) => k !== 'idempotencyKeyPath')) {
      issues.push({ path: at(key), message: 'is for http sources: an sqs source keys on the x-idempotency-key attribute, else idempotencyKeyPath, else the SQS MessageId' });
    }
    return;
  }
  if (chosen.length > 1) {
    issues.push({ path: at(chosen[1]!), message: `choose one of idempotencyKeyPath, idempotencyKeyHeader and idempotency (this source sets ${chosen.join(' and ')})` });
  } else if (chosen.length === 0 && source.auth?.type === 'hmac') {
    issues.push({
      path: at('idempotency'),
      message:
        'is required for an hmac source: set idempotencyKeyPath (a unique id in the signed body), idempotencyKeyHeader (the header carrying the delivery id) or idempotency: none (store every delivery)',
    });
  }
}

function checkTemplate(template: string, path: string[], issues: CrossCheckIssue[]): void {
  for (const match of template.matchAll(PLACEHOLDER)) {
    if (!KNOWN_PLACEHOLDERS.has(match[1]!)) issues.push({ path, message: `uses {{ ${match[1]} }}; only {{ source }} and {{ eventType }} are known` });
  }
  const rest = template.replace(PLACEHOLDER, '');
  if (rest.includes('{{') || rest.includes('}}')) issues.push({ path, message: 'has an unclosed or malformed {{ placeholder }}; only {{ source }} and {{ eventType }} are known' });
}
