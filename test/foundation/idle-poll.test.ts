import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { idlePollDelayMs } from '../../lib/claims/backoff.ts';

describe('idle polling', () => {
  it('waits pollIntervalMs after the first empty claim, doubling up to maxPollIntervalMs', () => {
    const waits = Array.from({ length: 8 }, (_, empty) => idlePollDelayMs(empty, { pollIntervalMs: 100, maxPollIntervalMs: 1000 }));
    assert.deepEqual(waits, [100, 200, 400, 800, 1000, 1000, 1000, 1000]);
  });

  it('about one claim a second once idle: a 55 s idle pass of the defaults sends 58 claims', () => {
    let at = 0;
    let claims = 0;
    for (let empty = 0; at < 55_000; empty++) {
      claims++;
      at += idlePollDelayMs(empty, { pollIntervalMs: 100, maxPollIntervalMs: 1000 });
    }
    assert.equal(claims, 58);
  });

  it('keeps a pollIntervalMs above maxPollIntervalMs (a fixed interval), and never overflows', () => {
    assert.deepEqual([0, 1, 5].map((empty) => idlePollDelayMs(empty, { pollIntervalMs: 5000, maxPollIntervalMs: 1000 })), [5000, 5000, 5000]);
    assert.equal(idlePollDelayMs(10_000, { pollIntervalMs: 100, maxPollIntervalMs: 1000 }), 1000);
    assert.equal(idlePollDelayMs(3, { pollIntervalMs: 0, maxPollIntervalMs: 1000 }), 0);
  });
});
