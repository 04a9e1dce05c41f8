/**
 * The longest delay Node.js timers take, in ms (2^31 − 1): `setTimeout` and `setInterval` asked
 * for more fire after 1 ms instead, and PostgreSQL's `lock_timeout` (the fenced writes' lock wait,
 * bounded by the lease) is an int32 of ms too. Every configured duration that reaches a timer or
 * a lock timeout is at most this (about 24.8 days), and a larger one is refused naming its key.
 */
export const MAX_TIMER_MS = 2_147_483_647;
