/**
 * One row and its history as far as the table knows it: created, due, attempts and the last
 * error, the last claim and its lease, replays, and the last change of state; and the trace
 * context it was written (outbox) or received (inbox) with.
 */
import type { ConsoleRow } from '../db/driver.ts';
import { attemptText } from './attempt-text.ts';
import { html, type SafeHtml } from './html.ts';
import { json, page, shown, SHOWN_CHARS, state, time, type ConsoleContext, type TableKind } from './layout.ts';
import { traceView } from './trace-view.ts';

/** The row page, or undefined when no such row exists (the server answers 404). */
export async function rowPage(ctx: ConsoleContext, kind: TableKind, id: string): Promise<SafeHtml | undefined> {
  const row = kind === 'outbox' ? await ctx.driver.outboxRowGet({ id }) : await ctx.driver.inboxRowGet({ id });
  if (!row) return undefined;
  const replayable = kind === 'outbox' && (row.state === 'dead' || row.state === 'sent');
  return page(
    ctx,
    '',
    `${kind} row ${row.id}`,
    html`<dl class="fields">
<dt>state</dt><dd>${state(row.state)}</dd>
<dt>${kind === 'outbox' ? 'topic' : 'source'}</dt><dd>${shown(ctx, row.label)}</dd>
<dt>${kind === 'outbox' ? 'key' : 'aggregate'}</dt><dd><code>${shown(ctx, row.key)}</code></dd>
<dt>attempt</dt><dd>${attemptText(row)}</dd>
<dt>sequence</dt><dd>${row.sequence}</dd>
${Object.entries(row.details).map(([k, v]) => html`<dt>${k}</dt><dd>${shown(ctx, v)}</dd>`)}
</dl>
<h2>History</h2><ol class="history">${history(row)}</ol>
${replayable ? html`<p><a href="/replay/preview?ids=${encodeURIComponent(row.id)}&amp;states=${row.state}">Preview a replay of this row</a></p>` : ''}
<h2>Last error</h2>${row.lastError ? html`<pre data-last-error>${ctx.redactor.text(row.lastError)}</pre>` : html`<p class="muted">none</p>`}
<h2>Trace</h2>${trace(ctx, kind, row)}
<h2>Payload</h2><pre data-payload>${json(ctx.redactor.value(row.payload), SHOWN_CHARS.row)}</pre>
<h2>Headers</h2><pre>${json(ctx.redactor.value(row.headers), SHOWN_CHARS.row)}</pre>
<p class="muted">Values under secret-named keys, URL passwords, bearer tokens and the configured secrets (in any field) are shown as ***.</p>`,
  );
}

function history(row: ConsoleRow): SafeHtml[] {
  const steps: SafeHtml[] = [html`<li>${time(row.createdAt)} — created${row.state === 'pending' && row.attempt === 0 ? ', waiting for its first attempt' : ''}</li>`];
  if (row.attempt > 0) steps.push(html`<li>${row.attempt}${row.maxAttempts !== null ? ` of ${row.maxAttempts}` : ''} attempt${row.attempt === 1 && row.maxAttempts === null ? '' : 's'} failed (a lease that expired during an attempt counts)${row.lastError ? ', the last one with the error below' : ''}</li>`);
  if (row.replayCount) steps.push(html`<li>replayed ${row.replayCount} time${row.replayCount === 1 ? '' : 's'} (attempts count again from 0 after each replay)</li>`);
  if (row.claimedAt) steps.push(html`<li>${time(row.claimedAt)} — last claimed; lease until ${time(row.leaseExpiresAt)}</li>`);
  if (row.state === 'pending') steps.push(html`<li>${time(row.scheduledAt)} — due for its next attempt</li>`);
  if (row.processedAt) steps.push(html`<li>${time(row.processedAt)} — processed</li>`);
  steps.push(html`<li>${time(row.updatedAt)} — last change, now ${state(row.state)}</li>`);
  return steps;
}

/**
 * The row's trace context (see `trace-view.ts` for what is shown and what is not). Only validated
 * values are shown, each through the redactor like every other value of the row (they are hex ids
 * and vendor names, so it changes nothing but keeps one rule for the whole page); a stored value
 * that does not validate is named, never shown.
 */
function trace(ctx: ConsoleContext, kind: TableKind, row: ConsoleRow): SafeHtml {
  const view = traceView(row.traceContext);
  if (view.kind === 'none') return html`<p class="muted" data-trace="none">none</p>`;
  if (view.kind === 'invalid') return html`<p class="muted" data-trace="invalid">invalid trace context: the stored value did not validate and is not shown</p>`;
  const text = (value: string) => ctx.redactor.text(value);
  const sampled = view.sampled === undefined ? 'not decided' : view.sampled ? 'yes' : 'no';
  return html`<dl class="fields" data-trace="valid">
<dt>trace id</dt><dd><code data-trace-id>${text(view.traceId)}</code></dd>
<dt>X-Ray trace id</dt><dd><code data-xray-trace-id>${text(view.xrayTraceId)}</code></dd>
<dt>parent span id</dt><dd>${view.parentSpanId === undefined ? html`<span class="muted">not recorded</span>` : html`<code data-parent-span-id>${text(view.parentSpanId)}</code>`}</dd>
<dt>sampled</dt><dd data-sampled>${sampled}</dd>
<dt>stored as</dt><dd>${view.forms.join(', ')}</dd>
${view.tracestateVendors.length > 0 ? html`<dt>tracestate</dt><dd>vendor${view.tracestateVendors.length === 1 ? '' : 's'}: ${text(view.tracestateVendors.join(', '))} <span class="muted">(values not shown)</span></dd>` : ''}
</dl>
${view.formsDiffer ? html`<p class="note">The stored traceparent and X-Ray header name different traces; deliveries publish each as stored.</p>` : ''}
${view.leftOut.length > 0 ? html`<p class="note" data-trace-left-out>Left out, as not valid: the stored ${view.leftOut.join(' and ')}.</p>` : ''}
<p class="muted">The trace of the code that ${kind === 'outbox' ? 'wrote this row' : 'sent this message'}: paste the X-Ray trace id into the X-Ray console or CloudWatch (Traces, search by trace ID).</p>`;
}
