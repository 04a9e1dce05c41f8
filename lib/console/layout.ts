/**
 * The console's page frame and small shared renderers (times, counts, states, links to rows).
 */
import type { QueueBoxConfig } from '../config/schema.ts';
import type { Driver } from '../db/driver.ts';
import type { DeadGroupDigests } from './dead-group.ts';
import { html, type HtmlValue, type SafeHtml } from './html.ts';
import type { Redactor } from './redact-row.ts';
import type { ReplayConfirmations } from './replay-confirmations.ts';
import { RequestGuard } from './request-guard.ts';

/** What every page handler receives. */
export interface ConsoleContext {
  driver: Driver;
  config: QueueBoxConfig;
  redactor: Redactor;
  guard: RequestGuard;
  /** The form token of this request's session ('' without a session: a form then cannot be posted). */
  formToken: string;
  /** Started with `--allow-actions`: replay may move rows. */
  allowActions: boolean;
  /** The replay previews a confirm may act on (each once). */
  confirmations: ReplayConfirmations;
  /** The digests of the dead groups' links (`dead-group.ts`). */
  groups: DeadGroupDigests;
}

/** The two tables the console reads. */
export type TableKind = 'outbox' | 'inbox';

const NAV = [
  ['/', 'Overview'],
  ['/blocked', 'Blocked keys'],
  ['/dead', 'Dead rows'],
  ['/replay', 'Replay'],
] as const;

/** A whole page: header with navigation and mode, then `body`. */
export function page(ctx: ConsoleContext, path: string, title: string, body: HtmlValue): SafeHtml {
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · QueueBox console</title><link rel="stylesheet" href="/assets/console.css"></head>
<body><header><strong>QueueBox</strong><nav>${NAV.map(([href, label]) => html`<a href="${href}" class="${path === href ? 'here' : ''}">${label}</a>`)}</nav>
<span class="mode ${ctx.allowActions ? 'actions' : ''}">${ctx.allowActions ? 'actions allowed' : 'read-only'}</span></header>
<main><h1>${title}</h1>${body}</main><script src="/assets/console.js"></script></body></html>`;
}

/** The latest time a `Date` holds (ECMAScript's limit, +275760-09-13), and minus it the earliest. */
const DATE_LIMIT_MS = 8.64e15;

/**
 * `2026-11-30 16:05:09.123Z`, or an em dash for null. PostgreSQL's `infinity` and `-infinity` are
 * read as the latest and earliest times a `Date` holds (so is a time past either, after the year
 * 275760): shown as `infinity` and `-infinity`, not as those dates.
 */
export function time(value: Date | null | undefined): string {
  if (!value) return '—';
  const ms = value.getTime();
  if (Math.abs(ms) === DATE_LIMIT_MS) return ms > 0 ? 'infinity' : '-infinity';
  return Number.isNaN(ms) ? 'an invalid time' : value.toISOString().replace('T', ' ');
}

/** A count that may have reached its cap: `≥ 100,000`. */
export function count(value: number, cap: number): string {
  return value >= cap ? `≥ ${value.toLocaleString('en-US')}` : value.toLocaleString('en-US');
}

/** A state with its colour class. */
export function state(value: string): SafeHtml {
  return html`<span class="state-${value}">${value}</span>`;
}

/**
 * A table's heading: `Outbox` or `Inbox`, and the configured table name when it is not the
 * default one (never `outbox (outbox)`).
 */
export function tableHeading(ctx: ConsoleContext, kind: TableKind, suffix = ''): SafeHtml {
  const name = ctx.config.tables[kind];
  const title = `${kind === 'outbox' ? 'Outbox' : 'Inbox'}${suffix}`;
  return name === kind ? html`${title}` : html`${title} <span class="muted">table <code>${name}</code></span>`;
}

/**
 * A value a sender or destination wrote (topic, key, source, aggregate id, event type…) as a page
 * shows it: through the redactor like errors and payloads, so a configured secret in it is masked;
 * `none` for null.
 */
export function shown(ctx: ConsoleContext, value: string | null | undefined, none = '—'): string {
  return value === null || value === undefined ? none : ctx.redactor.text(value);
}

/** Whether a value may travel in a link's address: only when the page shows it as it is (nothing in it is masked). */
export function linkable(ctx: ConsoleContext, value: string): boolean {
  return ctx.redactor.text(value) === value;
}

/** A link to a row's page. */
export function rowLink(kind: TableKind, id: string): SafeHtml {
  return html`<a class="id" href="/row/${kind}/${encodeURIComponent(id)}">${id.slice(0, 8)}…</a>`;
}

/** The hidden form token of a state-changing form. */
export function tokenField(ctx: ConsoleContext): SafeHtml {
  return html`<input type="hidden" name="${RequestGuard.FIELD}" value="${ctx.formToken}">`;
}

/** Characters of a payload shown in a list (the dead rows) and on a row's own page. */
export const SHOWN_CHARS = { list: 16 * 1024, row: 512 * 1024 } as const;

/**
 * Pretty JSON of an already redacted value, cut after `maxChars` with a note saying how much was
 * left out (a message that died for being too large must not make its page too large to load).
 */
export function json(value: unknown, maxChars: number): string {
  const text = JSON.stringify(value, null, 2) ?? 'null';
  if (text.length <= maxChars) return text;
  return `${text.slice(0, maxChars)}\n… cut here: ${(text.length - maxChars).toLocaleString('en-US')} more characters (${text.length.toLocaleString('en-US')} in all)`;
}
