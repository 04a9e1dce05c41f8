/**
 * The CloudWatch Logs Insights queries the docs show, and the log fields each one reads, so a
 * test can check them against the lines the code writes.
 */
import { readFileSync } from 'node:fs';

/** The Logs Insights queries (```text blocks) of a Markdown file that filter on `message = "<message>"`. */
export function docsQueries(path: string, message: string): string[] {
  const markdown = readFileSync(path, 'utf8');
  return [...markdown.matchAll(/```text\n([\s\S]*?)\n```/g)].map((m) => m[1]!).filter((query) => query.includes(`message = "${message}"`));
}

const LANGUAGE = new Set(['fields', 'filter', 'stats', 'sum', 'count', 'avg', 'min', 'max', 'by', 'sort', 'desc', 'asc', 'limit', 'as', 'and', 'or', 'not', 'in', 'like', 'bin']);

/** The log fields a query reads: its identifiers outside string literals, less the language's words, `@` fields and `as` aliases. */
export function queryFields(query: string): string[] {
  const aliases = new Set([...query.matchAll(/\bas\s+(\w+)/g)].map((m) => m[1]!));
  const words = query.replace(/"[^"]*"/g, '').match(/[@A-Za-z_][\w.]*/g) ?? [];
  return [...new Set(words.filter((w) => !LANGUAGE.has(w) && !aliases.has(w) && !w.startsWith('@')))];
}
