/**
 * Blocked keys and aggregates: each head row that is not moving, why (in words), how many rows of
 * its key wait behind it, and links to the failing head row and to the dead rows of its topic or
 * source (a row of the key that died earlier is among them).
 */
import type { ConsoleBlockedHead } from '../db/driver.ts';
import { attemptNumber } from './attempt-text.ts';
import { blockedReason, duration, POISON_ATTEMPTS } from './blocked-reason.ts';
import { html, queryString, type SafeHtml } from './html.ts';
import { linkable, page, rowLink, shown, state, tableHeading, time, type ConsoleContext, type TableKind } from './layout.ts';

/** Heads listed per table; candidates read per cause; rows counted behind a head. */
export const BLOCKED_LIMITS = { limit: 100, scanLimit: 1000, poisonAttempts: POISON_ATTEMPTS, waitingCap: 10_000 } as const;

/** The blocked keys and aggregates page (both tables, read concurrently). */
export async function blockedPage(ctx: ConsoleContext): Promise<SafeHtml> {
  const [keys, aggregates] = await Promise.all([ctx.driver.outboxBlockedKeys(BLOCKED_LIMITS), ctx.driver.inboxBlockedAggregates(BLOCKED_LIMITS)]);
  return page(
    ctx,
    '/blocked',
    'Blocked keys and aggregates',
    html`<p class="note">A key delivers one row at a time, in order. These heads are not moving: their lease expired, they wait for a retry,
they failed ${POISON_ATTEMPTS} times or more, or they are scheduled in the future with rows waiting behind them.</p>
<h2>${tableHeading(ctx, 'outbox', ' keys')}</h2>${table(ctx, 'outbox', keys)}<h2>${tableHeading(ctx, 'inbox', ' aggregates')}</h2>${table(ctx, 'inbox', aggregates)}`,
  );
}

function table(ctx: ConsoleContext, kind: TableKind, heads: ConsoleBlockedHead[]): SafeHtml {
  if (heads.length === 0) return html`<p class="muted" data-blocked="${kind}">No blocked ${kind === 'outbox' ? 'key' : 'aggregate'}.</p>`;
  const cap = BLOCKED_LIMITS.waitingCap;
  return html`<table data-blocked="${kind}"><thead><tr><th>${kind === 'outbox' ? 'key' : 'aggregate'}</th><th>head row</th><th>${kind === 'outbox' ? 'topic' : 'source'}</th>
<th>state</th><th class="num">attempt</th><th>next scheduled_at</th><th>lease expiry</th><th class="num">waiting behind</th><th>reason</th><th>last error</th></tr></thead><tbody>
${heads.map((h) => {
  const reason = blockedReason(h);
  // A topic or source holding a masked value is not put in a link: the page links all dead rows of the table instead.
  const deadRows = linkable(ctx, h.label)
    ? html`<a href="/dead${queryString({ table: kind, label: h.label })}" data-dead-of-label>dead rows of ${kind === 'outbox' ? 'this topic' : 'this source'} →</a>`
    : html`<a href="/dead${queryString({ table: kind })}" data-dead-of-table>dead ${kind} rows →</a>`;
  return html`<tr data-key="${shown(ctx, h.key)}" data-cause="${reason.cause}"><td><code>${shown(ctx, h.key)}</code></td><td>${rowLink(kind, h.id)}</td><td>${shown(ctx, h.label)}</td><td>${state(h.state)}</td>
<td class="num">${attemptNumber(h)}</td>
<td>${time(h.scheduledAt)}${h.dueInMs > 0 ? html`<br><span class="muted">in ${duration(h.dueInMs)}</span>` : ''}</td>
<td>${h.leaseExpiresAt ? html`${time(h.leaseExpiresAt)}<br><span class="muted">${h.leaseLeftMs < 0 ? `expired ${duration(-h.leaseLeftMs)} ago` : `${duration(h.leaseLeftMs)} left`}</span>` : '—'}</td>
<td class="num">${h.waitingBehind >= cap ? `≥ ${cap}` : h.waitingBehind}</td>
<td class="reason cause-${reason.cause}">${reason.text}<br><a href="/row/${kind}/${encodeURIComponent(h.id)}" data-head-row>${reason.cause === 'poison' || reason.cause === 'retry-backoff' ? 'failing head row' : 'head row'} →</a>
· ${deadRows}</td>
<td>${h.lastError ? html`<pre>${ctx.redactor.text(h.lastError)}</pre>` : '—'}</td></tr>`;
})}</tbody></table>`;
}
