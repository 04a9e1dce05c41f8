/**
 * Text form of a replay preview for a terminal: the count, then one line per sampled row
 * (created time, state, attempt, id, topic and key — inbox: source, consumption and aggregate —
 * and the first line of the last error), their text written as `terminalText`.
 */
import type { AnyReplayPreviewRow, ReplayPreview } from './replay.ts';
import { terminalText } from './terminal-text.ts';

const ERROR_WIDTH = 80;

/** Renders `previewReplay`'s result; `states` are the states the replay would move, `table` the rows' table. */
export function formatReplayPreview(preview: ReplayPreview, states: readonly string[], table: 'outbox' | 'inbox' = 'outbox'): string {
  const what = `${states.join('/')}${table === 'inbox' ? ' inbox' : ''} row${preview.count === 1 ? '' : 's'}`;
  const lines = [`would ${table === 'inbox' ? 'requeue' : 'replay'} ${preview.count} ${what} (dry run: nothing moved)`];
  if (preview.sample.length > 0) lines.push(`oldest ${preview.sample.length}:`);
  for (const r of preview.sample) {
    const error = terminalText((r.lastError ?? '').split('\n')[0]!);
    const cut = error.length > ERROR_WIDTH ? `${error.slice(0, ERROR_WIDTH - 1)}…` : error;
    lines.push(`  ${r.createdAt.toISOString()}  ${r.state.padEnd(4)}  attempt ${r.attempt}  ${r.id}  ${describe(r)}${cut ? `  ${cut}` : ''}`);
  }
  return `${lines.join('\n')}\n`;
}

/** The row's topic and key (inbox: source, consumption and aggregate), written as `terminalText`. */
function describe(r: AnyReplayPreviewRow): string {
  if ('topic' in r) return terminalText(`${r.topic}${r.key !== null ? `  key=${r.key}` : ''}`);
  return terminalText(`${r.source} (${r.consumption})${r.aggregateId ? `  aggregate=${r.aggregateId}` : ''}`);
}
