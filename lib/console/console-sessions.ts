/**
 * Who may use the console, and the form token of each browser.
 *
 * Every browser gets a session cookie (`HttpOnly`, `SameSite=Strict`, one name per port): a
 * random id and its HMAC under a key that lives as long as the process, so the console keeps no
 * session table and a forged cookie is simply not a session. A form's token is another HMAC of
 * the session id: a client that has not got the cookie cannot use a token it read, and a client
 * that has one can only act within its own session.
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

const sameText = (a: string, b: string) => {
  const [x, y] = [Buffer.from(a), Buffer.from(b)];
  return x.length === y.length && timingSafeEqual(x, y);
};

/** One console process's sessions. */
export class ConsoleSessions {
  readonly #key = randomBytes(32);
  readonly #cookie: string;
  readonly #accessToken: string | undefined;

  /** `port`: the console's port (cookies are shared between ports of one host); `accessToken`: required to start a session when set. */
  constructor(port: number, accessToken?: string) {
    this.#cookie = `queuebox_console_${port}`;
    this.#accessToken = accessToken;
  }

  /** Whether a session needs the access token. */
  get requiresToken(): boolean {
    return this.#accessToken !== undefined;
  }

  /** The verified session id a request's cookie carries, or undefined. */
  sessionOf(request: IncomingMessage): string | undefined {
    for (const part of (request.headers.cookie ?? '').split(';')) {
      const [name, value] = part.trim().split('=', 2);
      if (name !== this.#cookie || value === undefined) continue;
      const [id, mac] = value.split('.', 2);
      if (id !== undefined && mac !== undefined && /^[0-9a-f]{32}$/.test(id) && sameText(mac, this.#mac('session', id))) return id;
    }
    return undefined;
  }

  /** A new session: its id and the `Set-Cookie` value that carries it. */
  issue(): { id: string; setCookie: string } {
    const id = randomBytes(16).toString('hex');
    return { id, setCookie: `${this.#cookie}=${id}.${this.#mac('session', id)}; Path=/; HttpOnly; SameSite=Strict` };
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
