/**
 * The overview: rows per state of both tables, the oldest due pending row's age, throughput over
 * the last minute (the rate per second is that minute's count / 60) and the last hour, and the
 * claims in flight with their lease left. The fragment
 * (`/overview/live`) is what the page's script reloads every five seconds.
 */
import type { ConsoleClaim, ConsoleStateCounts } from '../db/driver.ts';
import { attemptNumber } from './attempt-text.ts';
import { duration } from './blocked-reason.ts';
import { html, type SafeHtml } from './html.ts';
import { count, page, rowLink, shown, state, tableHeading, time, type ConsoleContext, type TableKind } from './layout.ts';

/** Counts stop here: above it the page says "≥". */
export const COUNT_CAP = 100_000;
/** Claims listed per table. */
export const CLAIMS_SHOWN = 20;

/** The live part of the overview. */
export async function overviewFragment(ctx: ConsoleContext): Promise<SafeHtml> {
  const d = ctx.driver;
  const [outbox, inbox, outboxClaims, inboxClaims, now] = await Promise.all([
    d.outboxStatsByState({ countCap: COUNT_CAP }),
    d.inboxStatsByState({ countCap: COUNT_CAP }),
    d.outboxClaimsInFlight({ limit: CLAIMS_SHOWN }),
    d.inboxClaimsInFlight({ limit: CLAIMS_SHOWN }),
    d.clockNow(),
  ]);
  return html`<p class="muted">Database clock ${time(now)}. Counts stop at ${COUNT_CAP.toLocaleString('en-US')} (shown as ≥).</p>
<div class="cards">${card(ctx, 'outbox', outbox)}${card(ctx, 'inbox', inbox)}</div>
<h2>Claims in flight</h2>${claims(ctx, 'outbox', outboxClaims)}${claims(ctx, 'inbox', inboxClaims)}`;
}

/** The whole overview page. */
export async function overviewPage(ctx: ConsoleContext): Promise<SafeHtml> {
  return page(ctx, '/', 'Overview', html`<p id="live">live · refreshes every 5 s</p><div data-live="/overview/live">${await overviewFragment(ctx)}</div>`);
}

/** Rows per second over the last minute: `count / 60`, or `≥` when the count reached its cap. */
export function perSecondLastMinute(lastMinute: number, cap: number): string {
  const rate = (lastMinute / 60).toFixed(2);
  return lastMinute >= cap ? `≥ ${rate}` : rate;
}

function card(ctx: ConsoleContext, kind: TableKind, s: ConsoleStateCounts): SafeHtml {
  const cap = s.countCap;
  const finished = Object.keys(s.finishedLastMinute);
  return html`<section class="card" data-table="${kind}"><h2>${tableHeading(ctx, kind)}</h2>
<table><thead><tr><th>state</th><th class="num">rows</th></tr></thead><tbody>
${Object.entries(s.counts).map(([name, n]) => html`<tr data-state="${name}"><td>${state(name)}</td><td class="num">${count(n, cap)}</td></tr>`)}
</tbody></table>
<p>Oldest due pending row: <strong data-oldest>${duration(s.oldestPendingAgeSeconds * 1000)}</strong></p>
<table><thead><tr><th>finished</th><th class="num">last minute</th><th class="num">per second (last minute)</th><th class="num">last hour</th></tr></thead><tbody>
${finished.map(
  (name) => html`<tr data-finished="${name}"><td>${state(name)}</td><td class="num">${count(s.finishedLastMinute[name]!, cap)}</td>
<td class="num" data-rate>${perSecondLastMinute(s.finishedLastMinute[name]!, cap)}</td><td class="num">${count(s.finishedLastHour[name] ?? 0, cap)}</td></tr>`,
)}</tbody></table></section>`;
}

function claims(ctx: ConsoleContext, kind: TableKind, rows: ConsoleClaim[]): SafeHtml {
  if (rows.length === 0) return html`<p class="muted">${kind}: no row in processing.</p>`;
  return html`<table data-claims="${kind}"><thead><tr><th>${kind} row</th><th>${kind === 'outbox' ? 'topic' : 'source'}</th><th>${kind === 'outbox' ? 'key' : 'aggregate'}</th>
<th class="num">attempt</th><th>claimed at</th><th>lease</th></tr></thead><tbody>
${rows.map(
  (c) => html`<tr><td>${rowLink(kind, c.id)}</td><td>${shown(ctx, c.label)}</td><td>${shown(ctx, c.key)}</td><td class="num">${attemptNumber({ ...c, maxAttempts: null })}</td><td>${time(c.claimedAt)}</td>
<td class="${c.leaseLeftMs < 0 ? 'cause-expired-lease' : ''}">${c.leaseLeftMs < 0 ? `expired ${duration(-c.leaseLeftMs)} ago` : `${duration(c.leaseLeftMs)} left`}</td></tr>`,
)}</tbody></table>`;
}
