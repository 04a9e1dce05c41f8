/**
 * Dead rows, newest first: filter by topic (outbox) or source (inbox) and time, with the full
 * last error and the payload, secrets redacted.
 */
import type { ConsoleDeadQuery, ConsoleRow } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { operatorTimeProblem } from '../operations/operator-time.ts';
import { html, queryString, type SafeHtml } from './html.ts';
import { json, page, rowLink, SHOWN_CHARS, time, type ConsoleContext, type TableKind } from './layout.ts';

/** Rows per page, and dead rows read at most per search (the newest of the time range). */
export const DEAD_PAGE = { limit: 25, scanLimit: 10_000 } as const;

/**
 * Reads the filters from the query string; throws `UsageError` naming a bad field. `skip` is how
 * many rows of the newest millisecond below `to` the previous page showed already (see `deadPage`).
 */
export function parseDeadFilters(search: URLSearchParams): { kind: TableKind; query: ConsoleDeadQuery; skip: number } {
  const table = search.get('table') ?? 'outbox';
  if (table !== 'outbox' && table !== 'inbox') throw new UsageError(`table must be outbox or inbox, not "${table}"`);
  const query: ConsoleDeadQuery = { ...DEAD_PAGE };
  const label = search.get('label')?.trim();
  if (label?.includes('\0')) throw new UsageError('label must not contain a NUL character');
  if (label) query.label = label;
  for (const field of ['from', 'to'] as const) {
    const value = search.get(field)?.trim();
    if (!value) continue;
    const problem = operatorTimeProblem(value);
    if (problem) throw new UsageError(`${field} ${problem}, not "${value}"`);
    query[field] = new Date(value);
  }
  const skipText = search.get('skip')?.trim() || '0';
  const skip = Number(skipText);
  if (!/^\d+$/.test(skipText) || skip > DEAD_PAGE.scanLimit) throw new UsageError(`skip must be a whole number from 0 to ${DEAD_PAGE.scanLimit}, not "${skipText}"`);
  return { kind: table, query, skip };
}

/**
 * The query string of the next (older) page. Times reach the console with millisecond precision
 * while the tables keep microseconds, and rows finished in one batch share a millisecond: the
 * next page starts at the end of the last row's millisecond (`to` is exclusive) and skips the rows
 * of that millisecond already shown, so no row is left out between two pages.
 */
function olderPage(kind: TableKind, query: ConsoleDeadQuery, skip: number, rows: ConsoleRow[]): string {
  const at = (r: ConsoleRow) => (kind === 'outbox' ? r.updatedAt : r.createdAt).getTime();
  const boundary = at(rows.at(-1)!);
  const shown = rows.filter((r) => at(r) === boundary).length + (query.to?.getTime() === boundary + 1 ? skip : 0);
  return queryString({ table: kind, label: query.label, from: query.from?.toISOString(), to: new Date(boundary + 1).toISOString(), skip: shown });
}

/** The dead rows page: the filter form, one card per row, and a link to older rows. */
export async function deadPage(ctx: ConsoleContext, search: URLSearchParams): Promise<SafeHtml> {
  const { kind, query, skip } = parseDeadFilters(search);
  const read = { ...query, limit: query.limit + skip };
  const found = kind === 'outbox' ? await ctx.driver.outboxDeadSearch(read) : await ctx.driver.inboxDeadSearch(read);
  const result = { ...found, rows: found.rows.slice(skip) };
  const labelName = kind === 'outbox' ? 'topic' : 'source';
  const older = result.more && result.rows.length > 0 ? olderPage(kind, query, skip, result.rows) : '';
  return page(
    ctx,
    '/dead',
    'Dead rows',
    html`<form class="filters" method="get" action="/dead">
<label>table<select name="table"><option value="outbox" ${kind === 'outbox' ? 'selected' : ''}>outbox</option><option value="inbox" ${kind === 'inbox' ? 'selected' : ''}>inbox</option></select></label>
<label>topic or source<input name="label" value="${query.label ?? ''}" placeholder="exact name"></label>
<label>${kind === 'outbox' ? 'died' : 'received'} from (UTC)<input name="from" value="${query.from?.toISOString() ?? ''}" placeholder="2026-11-30T00:00:00Z"></label>
<label>to (exclusive)<input name="to" value="${query.to?.toISOString() ?? ''}"></label>
<button type="submit">Filter</button></form>
${result.scanCapped ? html`<p class="banner">Searched the newest ${DEAD_PAGE.scanLimit.toLocaleString('en-US')} dead rows of this time range; narrow the range to search further back.</p>` : ''}
${result.rows.length === 0 ? html`<p class="muted" data-dead-empty>No dead ${kind} row matches.</p>` : ''}
${result.rows.map(
  (r) => html`<section class="card" data-dead-row="${r.id}"><p>${rowLink(kind, r.id)} · ${labelName} <strong>${r.label}</strong>${r.key ? html` · key <code>${r.key}</code>` : ''}
· attempt ${r.attempt} · received ${time(r.createdAt)} · died ${time(r.updatedAt)}
${kind === 'outbox' ? html` · <a href="/replay/preview?ids=${encodeURIComponent(r.id)}">replay…</a>` : ''}</p>
<h3 class="muted">last error</h3><pre data-last-error>${ctx.redactor.text(r.lastError)}</pre>
<h3 class="muted">payload</h3><pre data-payload>${json(ctx.redactor.value(r.payload), SHOWN_CHARS.list)}</pre></section>`,
)}
${result.more ? html`<p><a href="/dead${older}">Older dead rows →</a></p>` : ''}`,
  );
}
