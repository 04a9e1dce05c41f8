/**
 * Recognizes a secret pasted where the name of an environment variable belongs, so that no
 * message ever prints it back. Environment variable names are short words joined by `_`; a
 * secret is a known vendor token shape, or a long run mixing letters and digits.
 */

const VENDOR_PREFIXES = /^(whsec_|sk_live_|sk_test_|rk_live_|rk_test_|pk_live_|ghp_|gho_|ghs_|ghu_|github_pat_|xox[abposr]-?|AKIA|ASIA|glpat-|npm_)/;

/** True when `value` looks like a credential rather than an environment variable name. */
export function looksLikeSecret(value: string): boolean {
  if (VENDOR_PREFIXES.test(value)) return true;
  const longestWord = Math.max(0, ...value.split('_').map((word) => word.length));
  const digits = (value.match(/\d/g) ?? []).length;
  return longestWord >= 20 || (value.length >= 24 && digits >= 6);
}

/**
 * How an error may name the variable an `…Env` key holds: the name itself when it has the usual
 * shape of one (upper-case words joined by `_`, like `STRIPE_WEBHOOK_SECRET`), else a phrase, so
 * that a short password pasted there (`hunter2`, `Passw0rd`) is never printed back.
 */
export function shownVariable(name: string): string {
  return /^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$/.test(name) && !looksLikeSecret(name) ? `environment variable ${name}` : 'an environment variable (name not shown: it does not look like one)';
}
