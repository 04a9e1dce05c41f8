/**
 * Protection of the console against other web pages and other hosts.
 *
 * The console listens on loopback, but any page open in the operator's browser can send it
 * requests. Every request must name one of the console's own hosts in `Host` (a DNS-rebinding
 * page sends its own name there). A state-changing request (POST) must also come from the
 * console's own origin (`Origin`, else `Referer`, must match) and carry the form token of the
 * session its cookie names (`ConsoleSessions`); a cross-site form can read neither.
 */
import type { IncomingMessage } from 'node:http';
import type { ConsoleSessions } from './console-sessions.ts';

/** Why a request was refused (HTTP status and a sentence), or undefined when allowed. */
export interface Refusal {
  status: number;
  message: string;
}

/** The Host, Sec-Fetch, Origin and form-token checks of one console process. */
export class RequestGuard {
  /** Hidden field name of the form token. */
  static readonly FIELD = 'token';
  readonly #hosts: Set<string>;
  /** The sessions whose form tokens a POST must carry. */
  readonly sessions: ConsoleSessions;

  /** `hosts`: every `host:port` the console answers as (its bind address and loopback names). */
  constructor(hosts: Iterable<string>, sessions: ConsoleSessions) {
    this.#hosts = new Set([...hosts].map((h) => h.toLowerCase()));
    this.sessions = sessions;
  }

  /** Checks `Host` on every request. */
  checkHost(request: IncomingMessage): Refusal | undefined {
    const host = (request.headers.host ?? '').toLowerCase();
    return this.#hosts.has(host) ? undefined : { status: 421, message: `this console does not answer for host "${host}"` };
  }

  /**
   * Refuses what another site's page makes the browser fetch in the background (an image, a
   * script, a no-cors fetch, a frame): such a GET would still run the console's reads, a replay
   * preview's count included. A link followed from another site (a top-level navigation) is allowed.
   * Browsers name the requesting site in `Sec-Fetch-Site`; a request without it (curl) passes.
   */
  checkFetch(request: IncomingMessage): Refusal | undefined {
    const site = request.headers['sec-fetch-site'];
    if (site !== 'cross-site' && site !== 'same-site') return undefined;
    const topLevel = request.headers['sec-fetch-mode'] === 'navigate' && (request.headers['sec-fetch-dest'] ?? 'document') === 'document';
    return topLevel ? undefined : { status: 403, message: 'refused: another site asked for this page in the background' };
  }

  /**
   * Whether a page was opened by following a link on another site (`Sec-Fetch-Site` cross-site or
   * same-site — another port on localhost is the same site — in a top-level navigation). Such a
   * request gets a page that names the link instead of running the read it asks for (a dead-row
   * search, a replay count): a click on that page, from the console itself, runs it.
   */
  isForeignNavigation(request: IncomingMessage): boolean {
    const site = request.headers['sec-fetch-site'];
    return (site === 'cross-site' || site === 'same-site') && request.headers['sec-fetch-mode'] === 'navigate';
  }

  /** Checks the origin of a state-changing request and that its form token is its session's. */
  checkAction(request: IncomingMessage, form: URLSearchParams): Refusal | undefined {
    const origin = request.headers.origin ?? refererOrigin(request.headers.referer);
    if (origin === undefined || origin === 'null' || !this.#hosts.has(originHost(origin))) {
      return { status: 403, message: 'refused: the request does not come from this console (Origin/Referer)' };
    }
    if (!this.sessions.checkFormToken(this.sessions.sessionOf(request), form.get(RequestGuard.FIELD) ?? '')) {
      return { status: 403, message: 'refused: missing or stale form token, or no session cookie (reload the page)' };
    }
    return undefined;
  }
}

function refererOrigin(referer: string | undefined): string | undefined {
  if (referer === undefined) return undefined;
  try {
    return new URL(referer).origin;
  } catch {
    return undefined;
  }
}

/** `http://127.0.0.1:4000` → `127.0.0.1:4000`; other schemes never match. */
function originHost(origin: string): string {
  try {
    const url = new URL(origin);
    return url.protocol === 'http:' ? url.host.toLowerCase() : '';
  } catch {
    return '';
  }
}
