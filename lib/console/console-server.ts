/**
 * The operator console's HTTP server (node:http, server-rendered pages, no framework).
 *
 * Every response carries a strict Content-Security-Policy (scripts and styles only from the
 * console itself, no framing, forms only to itself); every request is checked against the
 * console's host names, and every POST against its origin and its session's form token
 * (`RequestGuard`, `ConsoleSessions`). A bind address other than loopback needs an access token:
 * without one the server refuses to start. Read-only unless started with `allowActions`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname, networkInterfaces } from 'node:os';
import type { QueueBoxConfig } from '../config/schema.ts';
import type { Driver } from '../db/driver.ts';
import { QueueBoxError, UsageError } from '../errors.ts';
import { blockedPage } from './blocked-page.ts';
import { CONSOLE_CSS, CONSOLE_JS } from './console-assets.ts';
import { DeadGroupDigests } from './dead-group.ts';
import { deadPage } from './dead-page.ts';
import { html, type SafeHtml } from './html.ts';
import { page, type ConsoleContext } from './layout.ts';
import { overviewFragment, overviewPage } from './overview-page.ts';
import { configuredSecrets, createRedactor } from './redact-row.ts';
import { ReplayConfirmations } from './replay-confirmations.ts';
import { replayConfirmPage, replayFormPage, replayPreviewPage } from './replay-page.ts';
import { ACCESS_PARAM, ConsoleSessions, SESSION_MAX_AGE_SECONDS } from './console-sessions.ts';
import { RequestGuard } from './request-guard.ts';
import { rowPage } from './row-page.ts';

/**
 * Whether a bind address is one only this machine can reach: `localhost`, `::1`, or any address
 * of 127.0.0.0/8 (Linux routes all of them to the loopback interface; a console on an address of
 * its own, `127.x.y.z`, is a host name of its own to the browser, whose cookies no other local
 * service on 127.0.0.1 receives).
 */
export function isLoopback(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true;
  const octets = /^127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  return octets !== null && octets.slice(1).every((o) => Number(o) <= 255);
}

/** Largest form body accepted (a confirm of 100 ids is about 5 KB). */
const MAX_BODY_BYTES = 64 * 1024;

/** How much more of a refused (too large) body is read and dropped before the connection is closed. */
const DROPPED_BODY_BYTES = 1024 * 1024;

const SECURITY_HEADERS = {
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'same-origin',
  'cache-control': 'no-store',
};

/** What the console serves and where. */
export interface ConsoleServerOptions {
  driver: Driver;
  config: QueueBoxConfig;
  env?: Readonly<Record<string, string | undefined>>;
  /** Bind address; default 127.0.0.1. */
  host?: string;
  /** TCP port; 0 picks a free one. */
  port: number;
  allowActions?: boolean;
  /**
   * A secret a browser must present once (`/?access=<token>`) to get a session; required for any
   * `host` but loopback (127.0.0.0/8, ::1, localhost).
   */
  accessToken?: string;
  /** Unexpected errors (500) are reported here; default: nowhere. */
  onError?: (error: unknown) => void;
}

/** A started console. */
export interface ConsoleServer {
  /** `http://host:port`. */
  url: string;
  server: Server;
  close(): Promise<void>;
}

/** Starts the console; resolves once it listens. */
export async function startConsoleServer(options: ConsoleServerOptions): Promise<ConsoleServer> {
  const host = options.host ?? '127.0.0.1';
  if (!isLoopback(host) && (options.accessToken === undefined || options.accessToken.length < 16)) {
    throw new UsageError(`console: listening on ${host} (not loopback) needs an access token of 16 characters or more; the console has no other login`);
  }
  const hosts: string[] = [];
  const guardHolder: { guard?: RequestGuard } = {};
  const confirmations = new ReplayConfirmations();
  const server = createServer((request, response) => {
    handle(ctxOf(), request, response).catch((error: unknown) => {
      options.onError?.(error);
      if (!response.headersSent) send(response, 500, errorPage(ctxOf(), 'The console failed to answer', error));
      else response.end();
    });
  });
  const ctxOf = (): ConsoleContext => ({
    driver: options.driver,
    config: options.config,
    redactor,
    guard: guardHolder.guard!,
    formToken: '',
    allowActions: options.allowActions === true,
    confirmations,
    groups,
  });
  const groups = new DeadGroupDigests(options.driver.dialect);
  const redactor = createRedactor(configuredSecrets(options.config, options.env ?? process.env));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const bracketed = host.includes(':') ? `[${host}]` : host;
  for (const name of hostNames(host)) hosts.push(`${name.includes(':') ? `[${name}]` : name}:${port}`);
  guardHolder.guard = new RequestGuard(hosts, new ConsoleSessions(port, options.accessToken));
  return {
    url: `http://${bracketed}:${port}`,
    server,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

/** The names a browser may use for this console: the bind address, loopback, and for a wildcard bind every local address and the host name. */
function hostNames(host: string): string[] {
  const names = [host, '127.0.0.1', 'localhost', '::1'];
  if (host === '0.0.0.0' || host === '::') {
    names.push(hostname(), ...Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((a) => a.address)));
  }
  return names;
}

async function handle(base: ConsoleContext, request: IncomingMessage, response: ServerResponse): Promise<void> {
  const refusedHost = base.guard.checkHost(request);
  if (refusedHost) return sendText(response, refusedHost.status, refusedHost.message);
  const refusedFetch = base.guard.checkFetch(request);
  if (refusedFetch) return sendText(response, refusedFetch.status, refusedFetch.message);
  const url = new URL(request.url ?? '/', 'http://console.invalid');
  const path = url.pathname;
  const sessions = base.guard.sessions;
  let session = sessions.sessionOf(request);
  if (session === undefined && sessions.requiresToken && !sessions.presentsAccessToken(request, url)) {
    return sendText(response, 401, `this console needs its access token: open the address it printed when it started (…/?access=…); a session ends ${SESSION_MAX_AGE_SECONDS / 3600} hours after that`);
  }
  // A POST never starts a session: its form token must be the one of the session that served the form.
  if (session === undefined && request.method !== 'POST') {
    const issued = sessions.issue();
    session = issued.id;
    response.setHeader('set-cookie', issued.setCookie);
  }
  if (url.searchParams.has(ACCESS_PARAM) && request.method !== 'POST') {
    // The token leaves the address bar and the history as soon as the session cookie is set.
    url.searchParams.delete(ACCESS_PARAM);
    response.writeHead(303, { ...SECURITY_HEADERS, location: `/${url.pathname.replace(/^[/\\]+/, '')}${url.search}` });
    return void response.end();
  }
  const ctx: ConsoleContext = { ...base, formToken: session === undefined ? '' : sessions.formToken(session) };
  if (request.method !== 'GET' && request.method !== 'HEAD' && request.method !== 'POST') {
    response.setHeader('allow', 'GET, HEAD, POST');
    return sendText(response, 405, 'method not allowed');
  }
  if (path === '/assets/console.css') return sendAsset(response, 'text/css', CONSOLE_CSS);
  if (path === '/assets/console.js') return sendAsset(response, 'text/javascript', CONSOLE_JS);
  if (request.method !== 'POST' && path !== '/' && ctx.guard.isForeignNavigation(request)) return send(response, 200, foreignLinkPage(ctx, url));
  try {
    if (request.method === 'POST') {
      if (path !== '/replay') return send(response, 404, notFound(ctx));
      const form = await readForm(request);
      const refused = ctx.guard.checkAction(request, form);
      if (refused) return sendText(response, refused.status, refused.message);
      if (!ctx.allowActions) return sendText(response, 403, 'read-only console: start it with --allow-actions to replay from the browser');
      const result = await replayConfirmPage(ctx, form);
      return send(response, result.status, result.body);
    }
    if (path === '/') return send(response, 200, await overviewPage(ctx));
    if (path === '/overview/live') return send(response, 200, await overviewFragment(ctx));
    if (path === '/blocked') return send(response, 200, await blockedPage(ctx));
    if (path === '/dead') return send(response, 200, await deadPage(ctx, url.searchParams));
    if (path === '/replay') return send(response, 200, replayFormPage(ctx));
    if (path === '/replay/preview') {
      const result = await replayPreviewPage(ctx, url.searchParams);
      return send(response, result.status, result.body);
    }
    const row = /^\/row\/(outbox|inbox)\/([^/]+)$/.exec(path);
    if (row) {
      const body = await rowPage(ctx, row[1] as 'outbox' | 'inbox', decodePathPart(row[2]!));
      return send(response, body ? 200 : 404, body ?? notFound(ctx, 'No such row.'));
    }
  } catch (error) {
    if (error instanceof UsageError) return send(response, 400, errorPage(ctx, 'Bad request', error));
    throw error;
  }
  return send(response, 404, notFound(ctx));
}

/** A percent-decoded path segment; a malformed escape is the client's error (400), not the console's. */
function decodePathPart(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new UsageError(`malformed percent-encoding in the path: "${part}"`);
  }
}

/**
 * The body of a form POST. A body larger than `MAX_BODY_BYTES` (by its `Content-Length`, or as it
 * arrives) is refused with a 400 at once. The rest of the body is read and dropped, up to
 * `DROPPED_BODY_BYTES` more, then the connection is closed: closing it as soon as the answer is
 * written, with the client still sending, resets the connection under the client, which then
 * never reads the 400 (curl with a 20 MB form says "Broken pipe"); a client reads the 400 while it
 * sends, stops, and closes the connection itself.
 */
function readForm(request: IncomingMessage): Promise<URLSearchParams> {
  const type = (request.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/x-www-form-urlencoded') return Promise.reject(new UsageError('expected a form (application/x-www-form-urlencoded)'));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const tooLarge = () => {
      request.off('data', onData);
      let dropped = 0;
      request.on('data', (chunk: Buffer) => {
        dropped += chunk.length;
        if (dropped > DROPPED_BODY_BYTES) request.socket.destroy();
      });
      reject(new UsageError(`form larger than ${MAX_BODY_BYTES} bytes`));
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) return tooLarge();
      chunks.push(chunk);
    };
    request.on('error', reject);
    if (Number(request.headers['content-length'] ?? 0) > MAX_BODY_BYTES) return tooLarge();
    request.on('data', onData);
    request.on('end', () => resolve(new URLSearchParams(Buffer.concat(chunks).toString('utf8'))));
  });
}

function send(response: ServerResponse, status: number, body: SafeHtml): void {
  response.writeHead(status, { ...SECURITY_HEADERS, 'content-type': 'text/html; charset=utf-8' });
  response.end(body.text);
}

function sendText(response: ServerResponse, status: number, text: string): void {
  response.writeHead(status, { ...SECURITY_HEADERS, 'content-type': 'text/plain; charset=utf-8' });
  response.end(`${text}\n`);
}

function sendAsset(response: ServerResponse, type: string, body: string): void {
  response.writeHead(200, { ...SECURITY_HEADERS, 'content-type': `${type}; charset=utf-8`, 'cache-control': 'max-age=300' });
  response.end(body);
}

function notFound(ctx: ConsoleContext, text = 'No such page.'): SafeHtml {
  return page(ctx, '', 'Not found', html`<p>${text}</p><p><a href="/">Overview</a></p>`);
}

/** What a link from another site gets instead of the page it names: that page's address, to open from here. */
function foreignLinkPage(ctx: ConsoleContext, url: URL): SafeHtml {
  // One leading slash only: "//host" or "/\\host" would be another site's address in a browser.
  const target = `/${url.pathname.replace(/^[/\\]+/, '')}${url.search}`;
  return page(
    ctx,
    '',
    'Opened from another site',
    html`<p class="banner" data-foreign-link>A page on another site linked here. The console runs no search or count that another site asks for; open it from here if you meant to:</p>
<p><a href="${target}"><code>${target}</code></a></p><p><a href="/">Overview</a></p>`,
  );
}

function errorPage(ctx: ConsoleContext, title: string, error: unknown): SafeHtml {
  const message = error instanceof QueueBoxError ? error.message : error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return page(ctx, '', title, html`<p class="banner error" data-error>${ctx.redactor.text(message)}</p><p><a href="/">Overview</a></p>`);
}
