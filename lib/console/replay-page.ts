/**
 * Replay from the console: a form, a dry-run preview (count and the rows), and a confirm that
 * replays exactly the rows the preview listed — outbox rows, or dead inbox rows (relay and pull)
 * with `table=inbox`. Validation and the move are the CLI's own (`parseReplayRequest`,
 * `previewReplay`, `replayTarget` and the driver's replay, told to move each row only while it is
 * as the preview read it).
 *
 * The confirm acts on the previewed ids, not the filter (kept server-side under a one-time
 * confirmation id, `ReplayConfirmations`): rows that match the filter after the preview are not
 * moved, a previewed row that left `dead`/`sent` or changed meanwhile is not moved either, and a
 * preview is confirmed at most once. One confirm moves at most `REPLAY_PAGE_CAP` rows; the page says when more match.
 */
import { UsageError } from '../errors.ts';
import { parseReplayRequest, previewReplay, replayTarget, type AnyReplayPreviewRow, type ReplayPreview, type ReplayRequest } from '../operations/replay.ts';
import { DEAD_GROUPS, GROUP_DIGEST, GROUP_PARAM } from './dead-group.ts';
import { html, type SafeHtml } from './html.ts';
import { ReplayConfirmations } from './replay-confirmations.ts';
import { RequestGuard } from './request-guard.ts';
import { page, rowLink, shown, state, time, tokenField, type ConsoleContext, type TableKind } from './layout.ts';

/** Rows one preview lists and one confirm replays. */
export const REPLAY_PAGE_CAP = 100;

/** Rows a group's preview reads at most to find the group's rows among those its filters match (the oldest first). */
export const GROUP_PREVIEW_SCAN = DEAD_GROUPS.scanLimit;

const sameSet = (a: readonly string[], b: readonly string[]) => new Set(a).size === new Set(b).size && a.every((v) => b.includes(v));

const split = (values: string[], separator: RegExp) => values.flatMap((v) => v.split(separator).map((part) => part.trim())).filter((v) => v !== '');

/**
 * The replay request fields present in a query string or form (absent fields stay absent). Ids
 * and states are split on commas and white space; the topics and sources an operator types are
 * one per line (a topic may hold spaces and commas, as `queuebox replay --topic` takes it whole).
 * A link names one topic or source exactly (`topic`, `source`, repeatable, never split): its
 * pieces may be topics of their own.
 */
export function replayInput(form: URLSearchParams): Record<string, unknown> {
  // A parameter the form does not have, or one of its single fields given twice, is refused: left
  // out, a misspelled filter (`lastErrorPrfix`) would widen the replay, and of two values one would
  // be dropped without a word. The CLI refuses the same, as a flag it does not know or given twice.
  for (const key of new Set(form.keys())) {
    if (!FORM_FIELDS.has(key)) throw new UsageError(`replay: unknown parameter ${JSON.stringify(key)}; the filters are ${[...FILTER_FIELDS].join(', ')}`);
    if (!REPEATABLE_FIELDS.has(key) && form.getAll(key).length > 1) throw new UsageError(`replay: ${key} is given more than once; give it once`);
  }
  const input: Record<string, unknown> = {};
  for (const key of ['ids', 'states'] as const) {
    const list = split(form.getAll(key), /[\s,]+/);
    if (list.length > 0) input[key] = list;
  }
  for (const [key, exact] of [['topics', 'topic'], ['sources', 'source']] as const) {
    const list = [...split(form.getAll(key), /\r?\n/), ...form.getAll(exact).filter((v) => v !== '')];
    if (list.length > 0) input[key] = list;
  }
  for (const key of ['destination', 'consumption', 'createdFrom', 'createdTo'] as const) {
    const value = form.get(key)?.trim();
    if (value) input[key] = value;
  }
  // An error text is matched as typed (spaces included); only an empty field is absent.
  const lastErrorPrefix = form.get('lastErrorPrefix');
  if (lastErrorPrefix) input.lastErrorPrefix = lastErrorPrefix;
  const table = form.get('table');
  if (table && table !== 'outbox') input.table = table;
  return input;
}

/** The replay form's filters, as the preview's address and the confirm's form carry them. */
const FILTER_FIELDS: ReadonlySet<string> = new Set(['ids', 'states', 'topics', 'topic', 'sources', 'source', 'destination', 'consumption', 'createdFrom', 'createdTo', 'lastErrorPrefix', 'table']);
/** Everything a preview's address or a confirm's form may hold: the filters, the dead group, the confirm id and the form token. */
const FORM_FIELDS: ReadonlySet<string> = new Set([...FILTER_FIELDS, GROUP_PARAM, ReplayConfirmations.FIELD, RequestGuard.FIELD]);
/** Fields that may come more than once (each adds to a list). */
const REPEATABLE_FIELDS: ReadonlySet<string> = new Set(['ids', 'states', 'topics', 'topic', 'sources', 'source']);

/** The table a form names (`outbox` unless it says `inbox`). */
function formTable(form: URLSearchParams): TableKind {
  return form.get('table') === 'inbox' ? 'inbox' : 'outbox';
}

/** The replay filter form; `form` refills it, `error` explains why the last request was refused. */
export function replayFormPage(ctx: ConsoleContext, form = new URLSearchParams(), error?: string): SafeHtml {
  const states = new Set(form.getAll('states'));
  const table = formTable(form);
  const consumption = form.get('consumption') ?? '';
  return page(
    ctx,
    '/replay',
    'Replay',
    html`${error ? html`<p class="banner error" data-error>${error}</p>` : ''}
<p class="note">Moves dead (or sent) outbox rows, or dead inbox rows (relay and pull), back to pending. Preview first: nothing moves until you confirm the listed rows.
A requeued inbox row is again the head of its aggregate: the aggregate's pending rows wait for it.</p>
<form class="filters" method="get" action="/replay/preview">
<label>table<select name="table"><option value="outbox" ${table === 'outbox' ? 'selected' : ''}>outbox</option><option value="inbox" ${table === 'inbox' ? 'selected' : ''}>inbox</option></select></label>
<label>topics (outbox, one per line)<textarea name="topics" rows="2">${form.get('topics') ?? ''}</textarea></label>
<label>destination (outbox)<select name="destination"><option value="">any</option>${Object.keys(ctx.config.destinations).map(
      (d) => html`<option ${form.get('destination') === d ? 'selected' : ''}>${d}</option>`,
    )}</select></label>
<label>sources (inbox, one per line)<textarea name="sources" rows="2">${form.get('sources') ?? ''}</textarea></label>
<label>consumption (inbox)<select name="consumption"><option value="">any</option>${(['push', 'pull'] as const).map(
      (c) => html`<option value="${c}" ${consumption === c ? 'selected' : ''}>${c === 'push' ? 'push (relay)' : 'pull'}</option>`,
    )}</select></label>
<label>created from (UTC)<input name="createdFrom" value="${form.get('createdFrom') ?? ''}" placeholder="2026-11-30T00:00:00Z"></label>
<label>created to<input name="createdTo" value="${form.get('createdTo') ?? ''}"></label>
<label>last error starts with<input name="lastErrorPrefix" value="${form.get('lastErrorPrefix') ?? ''}" size="40"></label>
<label>row ids<input name="ids" value="${form.get('ids') ?? ''}" size="40"></label>
<label>states (outbox)<span><input type="checkbox" name="states" value="dead" ${states.size === 0 || states.has('dead') ? 'checked' : ''}> dead
<input type="checkbox" name="states" value="sent" ${states.has('sent') ? 'checked' : ''}> sent</span></label>
<button type="submit" data-action="dry-run">Dry run</button></form>`,
  );
}

/** The preview: count, the rows, and (with actions allowed) the confirm form. A bad request re-renders the form with the reason. */
export async function replayPreviewPage(ctx: ConsoleContext, search: URLSearchParams): Promise<{ status: number; body: SafeHtml }> {
  let request;
  try {
    request = parseReplayRequest(replayInput(search));
  } catch (error) {
    if (error instanceof UsageError) return { status: 400, body: replayFormPage(ctx, search, error.message) };
    throw error;
  }
  const group = search.get(GROUP_PARAM);
  let preview: GroupPreview;
  try {
    preview = group === null ? { ...(await previewReplay(ctx.driver, ctx.config, request, { sampleSize: REPLAY_PAGE_CAP })), complete: true } : await groupPreview(ctx, request, group);
  } catch (error) {
    if (error instanceof UsageError) return { status: 400, body: replayFormPage(ctx, search, error.message) };
    throw error;
  }
  const { count, sample } = preview;
  const states = request.states ?? ['dead'];
  const table = request.table ?? 'outbox';
  const verb = table === 'inbox' ? 'Requeue' : 'Replay';
  const matched = group === null
    ? html`<strong>${count}</strong> ${table} row${count === 1 ? '' : 's'} in state ${states.join(' or ')} match`
    : html`<strong>${preview.complete ? '' : 'at least '}${count}</strong> dead ${table} row${count === 1 ? '' : 's'} of the group you opened (the same ${table === 'outbox' ? 'topic' : 'source and consumption'} and the same first ${DEAD_GROUPS.errorChars} characters of the last error, or no error) match`;
  const confirm = ctx.allowActions
    ? html`<form method="post" action="/replay">${tokenField(ctx)}
<input type="hidden" name="${ReplayConfirmations.FIELD}" value="${sample.length > 0 ? ctx.confirmations.issue({ table, ids: sample.map((r) => r.id), states, updatedAt: Object.fromEntries(sample.map((r) => [r.id, r.updatedAt.getTime()])) }, ctx.formToken) : ''}">
<input type="hidden" name="table" value="${table}">
${sample.map((r) => html`<input type="hidden" name="ids" value="${r.id}">`)}${states.map((s) => html`<input type="hidden" name="states" value="${s}">`)}
<button type="submit" class="danger" data-action="confirm">${verb} these ${sample.length} ${table === 'inbox' ? 'inbox ' : ''}rows</button></form>`
    : html`<p class="banner">Read-only console: start it with <code>--allow-actions</code> to replay from here, or run <code>queuebox replay${table === 'inbox' ? ' --table inbox' : ''}</code>.</p>`;
  const body = html`<p class="banner" data-preview-count="${count}" data-preview-table="${table}"${preview.complete ? '' : html` data-preview-incomplete`}>Dry run: ${matched}. Nothing moved.</p>
${preview.complete ? '' : html`<p class="banner" data-group-searched>The group's rows were looked for among the oldest ${GROUP_PREVIEW_SCAN.toLocaleString('en-US')} of the ${preview.searched!.toLocaleString('en-US')} dead rows its link's filters match (the ${table === 'outbox' ? 'topic' : 'source'} and the start of the error, as far as the link may carry them); more of its rows may be among the others. ${
  count > 0 ? 'Replay these, then open the link again for more, or' : 'Replay its rows from the dead rows page (each has its own link), or'
} use <code>queuebox replay --id</code>.</p>`}
${group !== null && preview.complete && count === 0 ? html`<p class="note">No dead row of this group now. A group's link works in the console process that showed it: after a restart of the console, open Dead rows again.</p>` : ''}
${count > sample.length ? html`<p class="banner">Only the ${sample.length} oldest rows are listed, and a confirm replays exactly the listed rows (at most ${REPLAY_PAGE_CAP} at a time). Preview again afterwards for the rest, or use <code>queuebox replay</code> for a large replay.</p>` : ''}
${table === 'inbox' && sample.length > 0 ? html`<p class="note">Each requeued row keeps its place (its sequence): it is again the head of its aggregate, and the aggregate's pending rows wait for it. Rows of the aggregate already processed are not redone.</p>` : ''}
${sample.length > 0 ? html`${previewTable(ctx, table, sample)}${confirm}` : ''}
<p><a href="/replay${table === 'inbox' ? '?table=inbox' : ''}">← change the filter</a></p>`;
  return { status: 200, body: page(ctx, '/replay', 'Replay preview', body) };
}

/** A preview's count and listed rows; `complete` false when the count is a lower bound (`searched`: the rows the filters matched). */
type GroupPreview = ReplayPreview & { complete: boolean; searched?: number };

/**
 * The preview of one dead group (`dead-group.ts`): the rows the request's filters match (dead rows
 * only, the oldest `GROUP_PREVIEW_SCAN` of them) that belong to the group the digest names, the
 * oldest `REPLAY_PAGE_CAP` of them listed. The count is exact when the filters matched no more
 * rows than were read.
 */
async function groupPreview(ctx: ConsoleContext, request: ReplayRequest, group: string): Promise<GroupPreview> {
  if (!GROUP_DIGEST.test(group)) throw new UsageError(`${GROUP_PARAM} must be the value a dead group's link carries, not "${group}"`);
  if ((request.states ?? ['dead']).some((s) => s !== 'dead')) throw new UsageError(`replay: a dead group's rows are dead rows; ${GROUP_PARAM} selects no sent row`);
  const table = request.table ?? 'outbox';
  const read = await previewReplay(ctx.driver, ctx.config, request, { sampleSize: GROUP_PREVIEW_SCAN });
  const members = read.sample.filter(
    (r) => ctx.groups.digest('topic' in r ? { table, label: r.topic, consumption: null, error: r.lastError } : { table, label: r.source, consumption: r.consumption, error: r.lastError }) === group,
  );
  const complete = read.count <= read.sample.length;
  return { count: members.length, sample: members.slice(0, REPLAY_PAGE_CAP), complete, ...(complete ? {} : { searched: read.count }) };
}

/** The previewed rows: topic and key (outbox), or source, consumption and aggregate (inbox). */
function previewTable(ctx: ConsoleContext, table: TableKind, sample: AnyReplayPreviewRow[]): SafeHtml {
  const head = table === 'outbox' ? html`<th>topic</th><th>key</th>` : html`<th>source</th><th>consumption</th><th>aggregate</th>`;
  return html`<table data-preview><thead><tr><th>row</th>${head}<th>state</th><th class="num">attempt</th><th>created</th><th>last error</th></tr></thead><tbody>
${sample.map((r) => {
  const cells = 'topic' in r ? html`<td>${shown(ctx, r.topic)}</td><td>${shown(ctx, r.key)}</td>` : html`<td>${shown(ctx, r.source)}</td><td>${r.consumption}</td><td>${shown(ctx, r.aggregateId || null)}</td>`;
  return html`<tr data-id="${r.id}"><td>${rowLink(table, r.id)}</td>${cells}<td>${state(r.state)}</td><td class="num">${r.attempt}</td><td>${time(r.createdAt)}</td><td>${ctx.redactor.text(r.lastError).slice(0, 200)}</td></tr>`;
})}
</tbody></table>`;
}

/**
 * The confirm: replays the rows its preview listed that have not changed since, in the preview's
 * states, once. A confirm of
 * an unknown, expired or already confirmed preview is a 409; one naming other rows or states than
 * its preview a 400. Nothing moves in either case.
 */
export async function replayConfirmPage(ctx: ConsoleContext, form: URLSearchParams): Promise<{ status: number; body: SafeHtml }> {
  try {
    const input = replayInput(form);
    const previewId = form.get(ReplayConfirmations.FIELD) ?? '';
    if (previewId === '') throw new UsageError('replay: a confirm names its preview; preview first');
    const previewed = ctx.confirmations.take(previewId, ctx.formToken);
    if (!previewed) {
      return { status: 409, body: replayFormPage(ctx, new URLSearchParams(), 'replay: this preview was already confirmed, has expired, or was made in another browser session (only the session that previewed can confirm); nothing moved. Preview again.') };
    }
    const posted = (input.ids as string[] | undefined)?.map((id) => id.toLowerCase());
    if (posted && !sameSet(posted, previewed.ids)) throw new UsageError('replay: the confirm names rows its preview did not list; nothing moved. Preview again.');
    if (input.states && !sameSet(input.states as string[], previewed.states)) throw new UsageError('replay: the confirm names other states than its preview; nothing moved. Preview again.');
    if (formTable(form) !== previewed.table) throw new UsageError('replay: the confirm names another table than its preview; nothing moved. Preview again.');
    const ids = previewed.ids;
    if (ids.length > REPLAY_PAGE_CAP) throw new UsageError(`replay: a confirm from the console moves at most ${REPLAY_PAGE_CAP} rows, got ${ids.length}`);
    const table = previewed.table;
    const request = parseReplayRequest({ ...(table === 'inbox' ? { table } : {}), ids, states: previewed.states });
    // Only rows still as previewed: one replayed elsewhere and dead (or sent) again has a new
    // updated_at. The replay statement checks it as it moves each row, so nothing can change
    // between the check and the move.
    const asRead = ids.filter((id) => previewed.updatedAt[id] !== undefined).map((id) => ({ id, updatedAtMs: previewed.updatedAt[id]! }));
    const moved = asRead.length > 0 ? await replayTarget(ctx.driver, ctx.config, request).move({ asRead }) : 0;
    return {
      status: 200,
      body: page(
        ctx,
        '/replay',
        'Replay done',
        html`<p class="banner done" data-moved="${moved}">Moved <strong>${moved}</strong> of the ${ids.length} confirmed ${table} rows back to pending.</p>
${moved < ids.length ? html`<p class="banner">${ids.length - moved} row${ids.length - moved === 1 ? '' : 's'} had left ${(request.states ?? ['dead']).join('/')} or changed since the preview and were not moved.</p>` : ''}
<ul>${ids.map((id) => html`<li>${rowLink(table, id)}</li>`)}</ul><p><a href="/">Overview</a> · <a href="/dead?table=${table}">Dead ${table} rows</a> · <a href="/replay">Another replay</a></p>`,
      ),
    };
  } catch (error) {
    if (error instanceof UsageError) return { status: 400, body: replayFormPage(ctx, new URLSearchParams(), error.message) };
    throw error;
  }
}
