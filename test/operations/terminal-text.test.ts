/**
 * What the operator's terminal shows of rows written by senders and destinations: a topic, key,
 * aggregate id or error holding escape sequences is printed with them as visible `\uXXXX`, so a
 * row cannot clear the screen, set the window title, move the cursor or reorder the line.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DeadRowWatch } from '../../lib/local/local-dead-rows.ts';
import { formatReplayPreview } from '../../lib/operations/format-replay-preview.ts';
import { previewReplay, type ReplayRequest } from '../../lib/operations/replay.ts';
import { collectStatus, formatStatus } from '../../lib/operations/status.ts';
import { terminalText } from '../../lib/operations/terminal-text.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

/** Clear screen, set the window title, green "ALL GOOD", reset; a carriage return; a right-to-left override. */
const HOSTILE = '\u001b[2J\u001b]0;PWNED\u0007\u001b[32mALL GOOD\u001b[0m\rx\u202eevil\u009b1m';
/** No control character of C0, DEL or C1, and no bidirectional formatting character. */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

describe('row text printed to a terminal', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({
      destinations: { bus: { type: 'eventbridge', eventBusName: 'b', source: 's' } },
      outbox: { routes: [{ topicPattern: '**', destination: 'bus' }] },
    });
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload, state, last_error) VALUES ($1, $2, '{}', 'dead', $3)`, [`t${HOSTILE}`, `t${HOSTILE}`, `t${HOSTILE}`]);
    await db.query(
      `INSERT INTO "${db.schema}".inbox (source, idempotency_key, aggregate_id, payload, consumption, state, last_error) VALUES ('partner', 'e1', $1, '{}', 'push', 'dead', $2)`,
      [`a${HOSTILE}`, `a${HOSTILE}`],
    );
  });
  after(async () => db.drop());

  it('terminalText writes each control and bidirectional formatting character as \\uXXXX and keeps the rest', () => {
    assert.equal(terminalText('order.paid é 🚀'), 'order.paid é 🚀');
    assert.equal(terminalText('\u001b[2J'), '\\u001b[2J');
    assert.equal(terminalText('a\tb\nc\u007f\u009b\u202e\u2066'), 'a\\u0009b\\u000ac\\u007f\\u009b\\u202e\\u2066');
    assert.doesNotMatch(terminalText(HOSTILE), UNSAFE);
  });

  it('status prints a dead row\'s topic, source and error with their escape sequences visible', async () => {
    const text = formatStatus(await collectStatus(db.driver, db.config));
    assert.doesNotMatch(text.replace(/\n/g, ''), UNSAFE);
    assert.match(text, /t\\u001b\[2J\\u001b\]0;PWNED\\u0007/);
    assert.match(text, /ALL GOOD\\u001b\[0m x\\u202eevil\\u009b1m/, 'the carriage return is flattened to a space with the other whitespace');
  });

  it('queuebox local prints a row that became dead with its topic, source and error escapes visible', async () => {
    const lines: string[] = [];
    const watch = new DeadRowWatch(db.driver, db.config, (line) => lines.push(line));
    await watch.begin();
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, payload, state, last_error) VALUES ($1, '{}', 'dead', $2)`, [`local${HOSTILE}`, `local${HOSTILE}`]);
    await db.query(`INSERT INTO "${db.schema}".inbox (source, idempotency_key, payload, consumption, state, last_error) VALUES ($1, 'e2', '{}', 'push', 'dead', $2)`, [
      `src${HOSTILE}`,
      `local${HOSTILE}`,
    ]);
    const [outbox, inbox] = await Promise.all([db.driver.outboxStats(), db.driver.inboxStats()]);
    await watch.report({ outbox: outbox.counts, inbox: inbox.counts });
    assert.equal(lines.length, 2, lines.join('\n'));
    for (const line of lines) assert.doesNotMatch(line, UNSAFE, line);
    assert.match(lines[0]!, /topic local\\u001b\[2J.*: local\\u001b\[2J\\u001b\]0;PWNED\\u0007/);
    assert.match(lines[1]!, /source src\\u001b\[2J/);
  });

  it('a replay preview prints topic, key, aggregate and error with their escape sequences visible', async () => {
    const requests: Array<['outbox' | 'inbox', ReplayRequest]> = [
      ['outbox', { states: ['dead'], topics: [`t${HOSTILE}`] }],
      ['inbox', { table: 'inbox', states: ['dead'], sources: ['partner'] }],
    ];
    for (const [table, request] of requests) {
      const preview = await previewReplay(db.driver, db.config, request);
      assert.equal(preview.count, 1, table);
      const text = formatReplayPreview(preview, ['dead'], table);
      assert.doesNotMatch(text.replace(/\n/g, ''), UNSAFE, table);
      assert.match(text, table === 'outbox' ? /t\\u001b\[2J.*key=t\\u001b\[2J/ : /aggregate=a\\u001b\[2J\\u001b\]0;PWNED\\u0007/, table);
      assert.match(text, /\\u000dx\\u202eevil\\u009b1m/, `${table}: the error's carriage return is shown, not obeyed`);
    }
  });
});
