/**
 * Who may use the console, and the form token of each browser.
 *
 * Every browser gets a session cookie (`HttpOnly`, `SameSite=Strict`, one name per port): a
 * random id, the time it was issued and their HMAC under a key that lives as long as the process,
 * so the console keeps no session table and a forged cookie is simply not a session. A session
 * ends `SESSION_MAX_AGE_SECONDS` after it was issued: the cookie says so (`Max-Age`) and the
 * console refuses an older one whatever the browser sends. A form's token is another HMAC of
 * the session id: a client that has not got the cookie cannot use a token it read, and a client
 * that has one can only act within its own session.
 *
 * Browsers keep cookies per host name, not per port: every other server the browser visits on the
 * same host name (another local service on `127.0.0.1`) receives the cookie, and with it could use
 * the session until it ends. The bounded lifetime limits that; a console on a loopback address of
 * its own (`--host 127.x.y.z`) avoids it (see docs/security.md).
 *
 * With an access token (required for any bind address but loopback), a cookie is issued only to a
 * request that presents the token — `?access=<token>` once (the console then redirects to the
 * same address without it) or `Authorization: Bearer <token>` — and every other request without
 * a valid session is refused with 401. Without one (loopback), a cookie is issued to any browser
 * that asks: the Host, Sec-Fetch and Origin checks of `RequestGuard` keep other sites out.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** The query parameter that carries the access token. */
export const ACCESS_PARAM = 'access';

/**
 * How long a session lasts: 12 hours, one working day or shift — an operator opens the access
 * address once a day, and a cookie that leaked (another service on the same host name received it)
 * is useless by the next day.
 */
export const SESSION_MAX_AGE_SECONDS = 12 * 60 * 60;

const sameText = (a: string, b: string) => {
  const [x, y] = [Buffer.from(a), Buffer.from(b)];
  return x.length === y.length && timingSafeEqual(x, y);
};

/** One console process's sessions. */
export class ConsoleSessions {
  readonly #key = randomBytes(32);
  readonly #cookie: string;
  readonly #accessToken: string | undefined;
  readonly #now: () => number;

  /**
   * `port`: the console's port (cookies are shared between ports of one host); `accessToken`:
   * required to start a session when set; `now` (ms) is injectable for tests.
   */
  constructor(port: number, accessToken?: string, now: () => number = Date.now) {
    this.#cookie = `queuebox_console_${port}`;
    this.#accessToken = accessToken;
    this.#now = now;
  }

  /** Whether a session needs the access token. */
  get requiresToken(): boolean {
    return this.#accessToken !== undefined;
  }

  /** The verified session id a request's cookie carries, or undefined (none, forged, or issued `SESSION_MAX_AGE_SECONDS` ago or more). */
  sessionOf(request: IncomingMessage): string | undefined {
    for (const part of (request.headers.cookie ?? '').split(';')) {
      const [name, value] = part.trim().split('=', 2);
      if (name !== this.#cookie || value === undefined) continue;
      const [id, issued, mac] = value.split('.', 3);
      if (id === undefined || issued === undefined || mac === undefined || !/^[0-9a-f]{32}$/.test(id) || !/^[0-9]{1,15}$/.test(issued)) continue;
      if (!sameText(mac, this.#mac('session', `${id}:${issued}`))) continue;
      // A minute of slack for a clock stepped back since the cookie was issued.
      const age = this.#now() - Number(issued);
      if (age > -60_000 && age < SESSION_MAX_AGE_SECONDS * 1000) return id;
    }
    return undefined;
  }

  /** A new session: its id and the `Set-Cookie` value that carries it (with the time it was issued). */
  issue(): { id: string; setCookie: string } {
    const id = randomBytes(16).toString('hex');
    const issued = String(Math.trunc(this.#now()));
    return { id, setCookie: `${this.#cookie}=${id}.${issued}.${this.#mac('session', `${id}:${issued}`)}; Path=/; Max-Age=${SESSION_MAX_AGE_SECONDS}; HttpOnly; SameSite=Strict` };
  }

  /** Whether the request presents the access token (`?access=` or `Authorization: Bearer`); false when none is set. */
  presentsAccessToken(request: IncomingMessage, url: URL): boolean {
    if (this.#accessToken === undefined) return false;
    const bearer = /^Bearer\s+(\S+)$/i.exec(request.headers.authorization ?? '')?.[1];
    const sent = url.searchParams.get(ACCESS_PARAM) ?? bearer;
    return sent !== undefined && sameText(sent, this.#accessToken);
  }

  /** The form token of a session. */
  formToken(session: string): string {
    return this.#mac('form', session);
  }

  /** Whether `token` is the form token of `session`. */
  checkFormToken(session: string | undefined, token: string): boolean {
    return session !== undefined && sameText(token, this.formToken(session));
  }

  #mac(purpose: string, id: string): string {
    return createHmac('sha256', this.#key).update(`${purpose}:${id}`).digest('hex');
  }
}
