/**
 * What the console must never show: tokens recognisable by their shape (JWTs, provider prefixes)
 * and the configured secrets in the encodings they travel in (percent-encoding, JSON escapes,
 * base64 and base64url — alone or inside a longer base64 text such as a Basic credential).
 * `last_error` is stored through the same text rules.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { redactError } from '../../lib/claims/redact.ts';
import { configuredSecrets, createRedactor } from '../../lib/console/redact-row.ts';
import { shownPrefix } from '../../lib/console/dead-page.ts';

const SECRET = 'Hook$ecret/with+odd=chars 42';
const DB_PASSWORD = 'p@ss:w/rd!2026';
const env = { HOOK_SECRET: SECRET, DATABASE_URL: `postgres://app:${encodeURIComponent(DB_PASSWORD)}@db.internal:5432/app` };
const config = { inbox: { sources: { s: { auth: { type: 'hmac', secretEnv: 'HOOK_SECRET' } } } }, database: { urlEnv: 'DATABASE_URL' } };
const b64 = (text: string) => Buffer.from(text).toString('base64');
const b64url = (text: string) => Buffer.from(text).toString('base64url');
const jwt = `${b64url('{"alg":"HS256","typ":"JWT"}')}.${b64url('{"sub":"1234567890","name":"Ada"}')}.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c`;

/** Seventeen ways a secret reaches a payload or an error message. */
const CASES: Array<[string, string, string]> = [
  ['a JWT', `token expired: ${jwt}`, jwt],
  ['an unsigned JWT', `claims ${jwt.slice(0, jwt.lastIndexOf('.') + 1)} rejected`, jwt.slice(0, jwt.lastIndexOf('.'))],
  ['a Stripe live secret key', 'stripe said: invalid sk_live_51HqLyjWDarjtT1zdp7dcXYZ', 'sk_live_51HqLyjWDarjtT1zdp7dcXYZ'],
  ['a Stripe test secret key', 'key sk_test_4eC39HqLyjWDarjtT1zdp7dc used', 'sk_test_4eC39HqLyjWDarjtT1zdp7dc'],
  ['a Stripe restricted key', 'rk_live_51HqLyjWDarjtT1zdp7dcABCD', 'rk_live_51HqLyjWDarjtT1zdp7dcABCD'],
  ['a GitHub personal token', 'git clone with ghp_16C7e42F292c6912E7710c838347Ae178B4a failed', 'ghp_16C7e42F292c6912E7710c838347Ae178B4a'],
  ['a GitHub OAuth token', 'gho_16C7e42F292c6912E7710c838347Ae178B4a', 'gho_16C7e42F292c6912E7710c838347Ae178B4a'],
  ['a GitHub app token', 'ghs_16C7e42F292c6912E7710c838347Ae178B4a', 'ghs_16C7e42F292c6912E7710c838347Ae178B4a'],
  ['a fine-grained GitHub token', 'github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz', 'github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz'],
  ['a Slack bot token', 'slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx', 'xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx'],
  ['an AWS access key id', 'signed by ASIAIOSFODNN7EXAMPLE', 'ASIAIOSFODNN7EXAMPLE'],
  ['the configured secret as it is', `echo ${SECRET} back`, SECRET],
  ['the configured secret percent-encoded', `GET /hook?s=${encodeURIComponent(SECRET)}&x=1`, encodeURIComponent(SECRET)],
  ['the configured secret in base64', `blob ${b64(SECRET)} attached`, b64(SECRET).slice(0, 8)],
  ['the configured secret inside a base64 credential', `proxy ${b64(`hooks:${SECRET}`)}`, b64(`hooks:${SECRET}`).slice(12, 28)],
  ['the configured secret in base64url', `state=${b64url(`x${SECRET}`)}`, b64url(`x${SECRET}`).slice(4, 20)],
  ['the database password percent-encoded in another URL', `redirect to https://example.test/?pw=${encodeURIComponent(DB_PASSWORD)}`, encodeURIComponent(DB_PASSWORD)],
];

describe('console redaction', () => {
  const redactor = createRedactor(configuredSecrets(config, env));
  for (const [what, text, secret] of CASES) {
    it(`masks ${what} in text and in a payload value`, () => {
      assert.ok(!redactor.text(text).includes(secret), redactor.text(text));
      const shown = JSON.stringify(redactor.value({ note: text, list: [text] }));
      assert.ok(!shown.includes(secret), shown);
    });
  }

  it('keeps ordinary text: ids, words, short base64, dotted names', () => {
    const plain = 'order 3f1c2a9e-1b2c-4d5e-8f90-123456789abc shipped to eu-west-1 via api.example.com v1.2.3; skip_test_cases; ghost_town';
    assert.equal(redactor.text(plain), plain);
  });

  it('last_error is stored through the same text rules (a JWT and a provider token do not reach the table)', () => {
    const stored = redactError(new Error(`401 from https://api.example.test: ${jwt} / ghp_16C7e42F292c6912E7710c838347Ae178B4a`));
    assert.ok(!stored.includes(jwt) && !stored.includes('ghp_16C7'), stored);
  });

  it('masks a configured passphrase whole when a secret-named pair precedes it (the pair rule must not cut it first)', () => {
    const passphrase = 'correct horse battery staple';
    const own = createRedactor(configuredSecrets({ database: { passwordEnv: 'PW' } }, { PW: passphrase }));
    const shown = own.text(`login failed with password: ${passphrase}`);
    assert.ok(!shown.includes('battery staple'), shown);
  });

  it('reads a long run of JWT-like fragments once, not once per fragment (1 MiB from a webhook payload or an error)', { timeout: 60_000 }, () => {
    // Each "eyJ" after "-" starts a word; a regex that may start there rescans the rest of the run.
    const text = 'eyJaaaa-'.repeat(2 ** 17);
    assert.equal(redactError(text).length, 2000);
    assert.equal(redactor.text(text), text);
  });
  it('an error start cut through a configured secret (the dead groups cut it before redacting) masks the part of the secret left, in the group cell and in the replay link', () => {
    const error = `${'e'.repeat(110)}${SECRET} and the rest of the error`;
    const cut = error.slice(0, 120);
    assert.ok(cut.endsWith(SECRET.slice(0, 10)), 'the cut went through the secret');
    assert.equal(redactor.text(cut), cut, 'the whole-secret rule cannot see it');
    const shown = redactor.textCut(cut);
    assert.ok(!shown.includes(SECRET.slice(0, 4)), shown);
    assert.ok(shown.startsWith('e'.repeat(110)));
    const ctx = { redactor } as unknown as Parameters<typeof shownPrefix>[0];
    assert.equal(shownPrefix(ctx, cut), 'e'.repeat(110), 'the link carries the error only up to the masked secret');
    // Text that merely ends like the start of a secret by chance, under three characters, is kept.
    assert.equal(redactor.textCut('ends with Ho'), 'ends with Ho');
  });
  it('a stored error cut at its limit through a configured secret (it ends in …) masks the part of the secret left', () => {
    const stored = redactError(`${'x'.repeat(1985)} echoed ${SECRET}`);
    assert.ok(stored.endsWith('…') && stored.includes(SECRET.slice(0, 3)), 'the cut went through the secret');
    const shown = redactor.text(stored);
    assert.ok(!shown.includes(SECRET.slice(0, 3)), shown.slice(-40));
    assert.ok(shown.endsWith('***…'), shown.slice(-40));
  });
});
