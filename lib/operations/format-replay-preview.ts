/**
 * Text form of a replay preview for a terminal: the count, then one line per sampled row
 * (created time, state, attempt, id, topic, key, the first line of the last error).
 */
import type { ReplayPreviewRow } from '../db/driver.ts';

const ERROR_WIDTH = 80;

/** Renders `previewReplay`'s result; `states` are the states the replay would move. */
export function formatReplayPreview(preview: { count: number; sample: ReplayPreviewRow[] }, states: readonly string[]): string {
  const lines = [`would replay ${preview.count} ${states.join('/')} row${preview.count === 1 ? '' : 's'} (dry run: nothing moved)`];
  if (preview.sample.length > 0) lines.push(`oldest ${preview.sample.length}:`);
  for (const r of preview.sample) {
    const error = (r.lastError ?? '').split('\n')[0]!;
    const cut = error.length > ERROR_WIDTH ? `${error.slice(0, ERROR_WIDTH - 1)}…` : error;
    lines.push(`  ${r.createdAt.toISOString()}  ${r.state.padEnd(4)}  attempt ${r.attempt}  ${r.id}  ${r.topic}${r.key !== null ? `  key=${r.key}` : ''}${cut ? `  ${cut}` : ''}`);
  }
  return `${lines.join('\n')}\n`;
}
