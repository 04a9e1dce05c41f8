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
