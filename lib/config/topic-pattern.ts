/**
 * Route topic patterns (`outbox.routes[].topicPattern`): `*` is one non-empty, dot-free segment,
 * `**` any text (possibly empty, dots included); every other character matches itself; the
 * pattern matches the whole topic. "Any" means every character, line breaks (`\n`, `\r`, U+2028,
 * U+2029) included. One definition for routing, replay and every dialect.
 */

/**
 * Anchored regular-expression source for a topic pattern (`^…$`), valid both as a JavaScript
 * `RegExp` and as a PostgreSQL `~` pattern, so replay-by-destination can filter in SQL with
 * exactly the semantics of `createRouter`.
 */
export function topicPatternSource(pattern: string): string {
  let source = '';
  for (let i = 0; i < pattern.length; i++) {
    const char = pattern[i]!;
    if (char === '*') {
      if (pattern[i + 1] === '*') {
        source += '.*';
        i++;
      } else {
        source += '[^.]+';
      }
    } else if (/[\\^$.|?+()[\]{}/]/.test(char)) {
      source += `\\${char}`;
    } else {
      source += char;
    }
  }
  return `^${source}$`;
}

/**
 * The pattern as a JavaScript `RegExp` (routing; replay on SQL Server, which has no regex). The
 * `s` flag lets the `.` of `**` match line breaks too, as PostgreSQL's `~` does by default.
 */
export function compileTopicPattern(pattern: string): RegExp {
  return new RegExp(topicPatternSource(pattern), 'su');
}
