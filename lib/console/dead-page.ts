/**
 * Dead rows, newest first: filter by topic (outbox) or source (inbox) and time, with the full
 * last error and the payload, secrets redacted.
 */
import type { ConsoleDeadQuery } from '../db/driver.ts';
import { UsageError } from '../errors.ts';
import { html, queryString, type SafeHtml } from './html.ts';
import { json, page, rowLink, time, type ConsoleContext, type TableKind } from './layout.ts';

/** A date or date-time with a four-digit year (the range both databases store). */
const ISO_TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/;

/** Rows per page, and dead rows read at most per search (the newest of the time range). */
export const DEAD_PAGE = { limit: 25, scanLimit: 10_000 } as const;

/** Reads the filters from the query string; throws `UsageError` naming a bad field. */
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
    const date = new Date(value);
    if (!ISO_TIME.test(value) || Number.isNaN(date.getTime())) throw new UsageError(`${field} is not a time: "${value}" (use ISO-8601, e.g. 2026-11-30T12:00:00Z)`);
    query[field] = date;
  }
  return { kind: table, query };
}

/** The dead rows page: the filter form, one card per row, and a link to older rows. */
export async function deadPage(ctx: ConsoleContext, search: URLSearchParams): Promise<SafeHtml> {
  const { kind, query } = parseDeadFilters(search);
  const result = kind === 'outbox' ? await ctx.driver.outboxDeadSearch(query) : await ctx.driver.inboxDeadSearch(query);
  const labelName = kind === 'outbox' ? 'topic' : 'source';
  const last = result.rows.at(-1);
  const older = last ? queryString({ table: kind, label: query.label, from: query.from?.toISOString(), to: (kind === 'outbox' ? last.updatedAt : last.createdAt).toISOString() }) : '';
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
<h3 class="muted">payload</h3><pre data-payload>${json(ctx.redactor.value(r.payload))}</pre></section>`,
)}
${result.more ? html`<p><a href="/dead${older}">Older dead rows →</a></p>` : ''}`,
  );
}
