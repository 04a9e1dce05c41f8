/**
 * Every link in the README and docs/ that points into this repository resolves: the file exists,
 * and a `#fragment` names a heading of that file (GitHub's anchors) or an explicit `<a id>`.
 * Links rot when a heading is renamed or a section moves; this catches it in `npm test`.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, it } from 'node:test';

const docs = ['README.md', ...readdirSync('docs').filter((f) => f.endsWith('.md')).map((f) => join('docs', f))];

/** Fenced code blocks and inline code spans hold no links. */
function proseOf(markdown: string): string {
  return markdown.replace(/^(```|~~~)[\s\S]*?^\1/gm, '').replace(/`[^`\n]*`/g, '');
}

/** GitHub's heading anchor: lowercased, punctuation but `-` and `_` dropped, spaces to `-`; repeats get `-1`, `-2`. */
export function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const withoutCode = markdown.replace(/^(```|~~~)[\s\S]*?^\1/gm, '');
  for (const [, text] of withoutCode.matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const plain = text!
      .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
      .replace(/<[^>]+>/g, '')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(plain) ?? 0;
    seen.set(plain, n + 1);
    anchors.add(n === 0 ? plain : `${plain}-${n}`);
  }
  for (const [, id] of markdown.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(id!);
  return anchors;
}

describe('links in the README and docs/', () => {
  it('computes GitHub anchors as GitHub does', () => {
    const anchors = anchorsOf('# A title\n## Several rows of a key per claim (`outbox.rowsPerKey`)\n### The current claim: gauge interval, window gate\n## A title\n```\n# not a heading\n```\n');
    assert.deepEqual([...anchors], ['a-title', 'several-rows-of-a-key-per-claim-outboxrowsperkey', 'the-current-claim-gauge-interval-window-gate', 'a-title-1']);
  });

  for (const doc of docs) {
    it(`${doc}: every local link names a file that exists and a heading in it`, () => {
      const broken: string[] = [];
      const text = proseOf(readFileSync(doc, 'utf8'));
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target!)) continue; // https:, mailto: — not ours to check
        const [path, fragment] = target!.split('#') as [string, string | undefined];
        const file = path === '' ? doc : normalize(join(dirname(doc), decodeURIComponent(path)));
        if (!existsSync(file)) {
          broken.push(`${target} (no file ${file})`);
          continue;
        }
        if (fragment === undefined || fragment === '' || statSync(file).isDirectory() || !file.endsWith('.md')) continue;
        if (!anchorsOf(readFileSync(file, 'utf8')).has(decodeURIComponent(fragment))) broken.push(`${target} (no heading #${fragment} in ${file})`);
      }
      assert.deepEqual(broken, [], `${doc} has broken links`);
    });
  }
});
