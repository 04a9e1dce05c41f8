/**
 * Dead rows, newest first: filter by topic (outbox) or source (inbox) and time, with the full
 * last error and the payload, secrets redacted.
 */
import type { ConsoleDeadQuery } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { operatorTimeProblem } from '../operations/operator-time.ts';
import { attemptText } from './attempt-text.ts';
import { html, queryString, type SafeHtml } from './html.ts';
import { json, page, rowLink, SHOWN_CHARS, time, type ConsoleContext, type TableKind } from './layout.ts';

/** Rows per page, and dead rows read at most per search (the newest of the time range). */
export const DEAD_PAGE = { limit: 25, scanLimit: 10_000 } as const;

/** A cursor as the "Older dead rows" link carries it: the last shown row's stored time and its id. */
const CURSOR = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,7})?Z)~([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/i;

/**
 * Reads the filters from the query string; throws `UsageError` naming a bad field. `before` is
 * the cursor of an "Older dead rows" link (keyset paging: a deep page reads only its own rows).
 */
export function parseDeadFilters(search: URLSearchParams): { kind: TableKind; query: ConsoleDeadQuery } {
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
  const before = search.get('before')?.trim();
  if (before) {
    const match = CURSOR.exec(before);
    if (!match || operatorTimeProblem(match[1]!) !== undefined) throw new UsageError(`before must be the position an "Older dead rows" link carries (time~row id), not "${before}"`);
    query.before = { at: match[1]!, id: match[2]!.toLowerCase() };
  }
  return { kind: table, query };
}

/** The dead rows page: the filter form, one card per row, and a link to older rows. */
export async function deadPage(ctx: ConsoleContext, search: URLSearchParams): Promise<SafeHtml> {
  const { kind, query } = parseDeadFilters(search);
  const result = kind === 'outbox' ? await ctx.driver.outboxDeadSearch(query) : await ctx.driver.inboxDeadSearch(query);
  const labelName = kind === 'outbox' ? 'topic' : 'source';
  const older = result.next
    ? queryString({ table: kind, label: query.label, from: query.from?.toISOString(), to: query.to?.toISOString(), before: `${result.next.at}~${result.next.id}` })
    : '';
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
${result.scanCapped ? html`<p class="banner">Searched the newest ${DEAD_PAGE.scanLimit.toLocaleString('en-US')} dead rows of this time range${query.before ? ' older than the previous page' : ''}; narrow the range to search further back.</p>` : ''}
${result.rows.length === 0 ? html`<p class="muted" data-dead-empty>No dead ${kind} row matches.</p>` : ''}
${result.rows.map(
  (r) => html`<section class="card" data-dead-row="${r.id}"><p>${rowLink(kind, r.id)} · ${labelName} <strong>${r.label}</strong>${r.key ? html` · key <code>${r.key}</code>` : ''}
· ${attemptText(r)} · received ${time(r.createdAt)} · died ${time(r.updatedAt)}
${kind === 'outbox' ? html` · <a href="/replay/preview?ids=${encodeURIComponent(r.id)}">replay…</a>` : ''}</p>
<h3 class="muted">last error</h3><pre data-last-error>${ctx.redactor.text(r.lastError)}</pre>
<h3 class="muted">payload</h3><pre data-payload>${json(ctx.redactor.value(r.payload), SHOWN_CHARS.list)}</pre></section>`,
)}
${older ? html`<p><a href="/dead${older}">Older dead rows →</a></p>` : ''}`,
  );
}
