/**
 * Dead rows: first grouped by topic (inbox: source and consumption), error start and, for the
 * outbox, the destination the topic routes to, with counts and a link that previews the group's
 * replay (its rows listed, to requeue); then the rows, newest first, filtered by topic (outbox) or
 * source (inbox) and time, with the full last error and the payload, secrets redacted.
 */
import type { ConsoleDeadGroup, ConsoleDeadQuery } from '../db/driver.ts';
import { createRouter } from '../outbox/routes.ts';
import { UsageError } from '../errors.ts';
import { operatorTimeProblem } from '../operations/operator-time.ts';
import { attemptText } from './attempt-text.ts';
import { DEAD_GROUPS, GROUP_PARAM } from './dead-group.ts';
import { html, queryString, type SafeHtml } from './html.ts';
import { json, linkable, page, rowLink, shown, SHOWN_CHARS, tableHeading, time, type ConsoleContext, type TableKind } from './layout.ts';

export { DEAD_GROUPS } from './dead-group.ts';

/** Rows per page, and dead rows read at most per search (the newest of the time range). */
export const DEAD_PAGE = { limit: 25, scanLimit: 10_000 } as const;

/** The replay preview of one row or group: the rows it lists, and the confirm that requeues them. */
export function replayLink(kind: TableKind, filter: { ids?: string; label?: string; consumption?: string | null; error?: string | null; group?: string }): string {
  return `/replay/preview${queryString({
    ...(kind === 'inbox' ? { table: 'inbox' } : {}),
    ids: filter.ids,
    // The exact topic or source, never split (`replayInput`).
    [kind === 'outbox' ? 'topic' : 'source']: filter.label,
    consumption: filter.consumption ?? undefined,
    lastErrorPrefix: filter.error ?? undefined,
    [GROUP_PARAM]: filter.group,
  })}`;
}

/**
 * The link to the replay preview of exactly one group (`dead-group.ts`): the filters that narrow
 * the search without a masked value — the topic or source when nothing in it is masked, the
 * consumption, the error start up to its first masked character — and the group's digest, which
 * the preview keeps the rows of. Undefined when the link could carry neither the topic or source
 * nor an error start: no filter would then narrow the search without a secret.
 */
export function groupLink(ctx: ConsoleContext, kind: TableKind, group: ConsoleDeadGroup): string | undefined {
  const label = linkable(ctx, group.label) ? group.label : undefined;
  // Without trailing spaces: SQL Server groups "x" and "x " together, and a shorter start only widens the search.
  const error = shownPrefix(ctx, group.error)?.replace(/ +$/, '') || null;
  if (label === undefined && error === null) return undefined;
  const digest = ctx.groups.digest({ table: kind, label: group.label, consumption: group.consumption, error: group.error });
  return replayLink(kind, { label, consumption: group.consumption, error, group: digest });
}

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

/** The dead rows page: the groups (first page only), the filter form, one card per row, and a link to older rows. */
export async function deadPage(ctx: ConsoleContext, search: URLSearchParams): Promise<SafeHtml> {
  const { kind, query } = parseDeadFilters(search);
  const [result, groups] = await Promise.all([
    kind === 'outbox' ? ctx.driver.outboxDeadSearch(query) : ctx.driver.inboxDeadSearch(query),
    query.before ? undefined : kind === 'outbox' ? ctx.driver.outboxDeadGroups(DEAD_GROUPS) : ctx.driver.inboxDeadGroups(DEAD_GROUPS),
  ]);
  const labelName = kind === 'outbox' ? 'topic' : 'source';
  const older = result.next
    ? queryString({ table: kind, label: query.label, from: query.from?.toISOString(), to: query.to?.toISOString(), before: `${result.next.at}~${result.next.id}` })
    : '';
  return page(
    ctx,
    '/dead',
    'Dead rows',
    html`<p class="tabs"><a href="/dead" class="${kind === 'outbox' ? 'here' : ''}">Outbox</a> · <a href="/dead?table=inbox" class="${kind === 'inbox' ? 'here' : ''}">Inbox</a></p>
${groups ? groupsTable(ctx, kind, groups.groups, groups.scanCapped) : ''}
<h2>${tableHeading(ctx, kind, ' dead rows')}</h2>
<form class="filters" method="get" action="/dead">
<label>table<select name="table"><option value="outbox" ${kind === 'outbox' ? 'selected' : ''}>outbox</option><option value="inbox" ${kind === 'inbox' ? 'selected' : ''}>inbox</option></select></label>
<label>topic or source<input name="label" value="${query.label ?? ''}" placeholder="exact name"></label>
<label>${kind === 'outbox' ? 'died' : 'received'} from (UTC)<input name="from" value="${query.from?.toISOString() ?? ''}" placeholder="2026-11-30T00:00:00Z"></label>
<label>to (exclusive)<input name="to" value="${query.to?.toISOString() ?? ''}"></label>
<button type="submit">Filter</button></form>
${result.scanCapped ? html`<p class="banner">Searched the newest ${DEAD_PAGE.scanLimit.toLocaleString('en-US')} dead rows of this time range${query.before ? ' older than the previous page' : ''}; narrow the range to search further back.</p>` : ''}
${result.rows.length === 0 ? html`<p class="muted" data-dead-empty>No dead ${kind} row matches.</p>` : ''}
${result.rows.map(
  (r) => html`<section class="card" data-dead-row="${r.id}"><p>${rowLink(kind, r.id)} · ${labelName} <strong>${shown(ctx, r.label)}</strong>${r.key ? html` · ${kind === 'outbox' ? 'key' : 'aggregate'} <code>${shown(ctx, r.key)}</code>` : ''}
${kind === 'inbox' ? html` · ${shown(ctx, r.details.consumption, '')}` : ''} · ${attemptText(r)} · received ${time(r.createdAt)} · died ${time(r.updatedAt)}
· <a href="${replayLink(kind, { ids: r.id })}" data-replay-row>${kind === 'outbox' ? 'replay…' : 'requeue…'}</a></p>
<h3 class="muted">last error</h3><pre data-last-error>${ctx.redactor.text(r.lastError)}</pre>
<h3 class="muted">payload</h3><pre data-payload>${json(ctx.redactor.value(r.payload), SHOWN_CHARS.list)}</pre></section>`,
)}
${older ? html`<p><a href="/dead${older}">Older dead rows →</a></p>` : ''}`,
  );
}

/**
 * The part of an error start that a link may carry: up to its first redacted character (a link
 * never carries a secret the page masks), or none when that leaves nothing.
 */
export function shownPrefix(ctx: ConsoleContext, error: string | null): string | null {
  if (error === null) return null;
  // The error start is cut before it is redacted (`left(last_error, …)` in the database).
  const shown = ctx.redactor.textCut(error);
  let same = 0;
  while (same < error.length && same < shown.length && error[same] === shown[same]) same++;
  return same === error.length ? error : same > 0 ? error.slice(0, same) : null;
}

/**
 * The groups: count, topic and destination (outbox) or source and consumption (inbox), the error
 * start (redacted), the newest row's time, and the link to the preview of the group's rows.
 */
function groupsTable(ctx: ConsoleContext, kind: TableKind, groups: ConsoleDeadGroup[], scanCapped: boolean): SafeHtml {
  const heading = html`<h2>${tableHeading(ctx, kind, ' dead rows by error')}</h2>`;
  if (groups.length === 0) return html`${heading}<p class="muted" data-dead-groups="${kind}">No dead ${kind} row.</p>`;
  const route = kind === 'outbox' ? createRouter(ctx.config.outbox.routes) : undefined;
  const where = kind === 'outbox' ? html`<th>topic</th><th>destination</th>` : html`<th>source</th><th>consumption</th>`;
  const rows = groups.map((g) => ({ g, link: groupLink(ctx, kind, g) }));
  const unlinked = rows.some((r) => r.link === undefined);
  return html`${heading}
<p class="note">${scanCapped ? `The newest ${DEAD_GROUPS.scanLimit.toLocaleString('en-US')} dead rows, g` : 'G'}rouped by ${kind === 'outbox' ? 'topic' : 'source and consumption'} and the first ${DEAD_GROUPS.errorChars} characters of the last error, largest first.
<strong>Rows</strong> lists a group's rows (up to 100) in a replay preview: nothing moves until you confirm there.${unlinked ? html`
<span data-group-unlinked>A group without that link has a ${kind === 'outbox' ? 'topic' : 'source'} holding a masked value and an error that starts with one (or no error): no address can select exactly its rows without carrying the secret. Replay its rows one by one below, or with <code>queuebox replay --id</code>.</span>` : ''}</p>
<table data-dead-groups="${kind}"><thead><tr><th class="num">rows</th>${where}<th>last error starts with</th><th>newest</th><th></th></tr></thead><tbody>
${rows.map(({ g, link }) => {
  const cells = kind === 'outbox' ? html`<td>${shown(ctx, g.label)}</td><td>${route!(g.label) ?? html`<span class="muted">no route</span>`}</td>` : html`<td>${shown(ctx, g.label)}</td><td>${g.consumption ?? '—'}</td>`;
  const errorText = g.error === null ? html`<span class="muted">no error</span>` : html`<code>${ctx.redactor.textCut(g.error)}</code>`;
  const action = link === undefined ? html`<span class="muted">no link</span>` : html`<a href="${link}" data-group-rows>rows and ${kind === 'outbox' ? 'replay' : 'requeue'}…</a>`;
  return html`<tr data-group-count="${g.count}">${html`<td class="num">${g.count.toLocaleString('en-US')}</td>`}${cells}<td>${errorText}</td><td>${time(g.latest)}</td>
<td>${action}</td></tr>`;
})}</tbody></table>`;
}
