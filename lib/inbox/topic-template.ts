/**
 * The topic of a relayed row: `inbox.topicTemplate` (or the source's `topicTemplate`) with
 * `{{ source }}` and `{{ eventType }}` replaced.
 */
import { ConfigError } from '../errors.ts';

const PLACEHOLDER = /\{\{\s*([A-Za-z]+)\s*\}\}/g;
const KNOWN = new Set(['source', 'eventType']);

/** Throws `ConfigError` naming `key` when the template uses a placeholder other than the two known ones. */
export function checkTopicTemplate(template: string, key: string): void {
  for (const match of template.matchAll(PLACEHOLDER)) {
    if (!KNOWN.has(match[1]!)) {
      throw new ConfigError([{ key, message: `uses {{ ${match[1]} }}; only {{ source }} and {{ eventType }} are known` }]);
    }
  }
}

/**
 * The rendered topic, or the reason the row cannot have one (it then goes `dead`): `missing` when
 * the template needs an event type the row lacks, `empty` when the render is only whitespace.
 */
export type TopicRender = { topic: string } | { error: string; cause: 'missing' | 'empty' };

/** Renders `template` for a row; an empty render (once trimmed) or a missing event type the template needs is an error. */
export function renderTopic(template: string, values: { source: string; eventType: string | null }): TopicRender {
  let missing = false;
  const topic = template
    .replace(PLACEHOLDER, (_, name: string) => {
      if (name === 'source') return values.source;
      if (values.eventType === null || values.eventType === '') missing = true;
      return values.eventType ?? '';
    })
    .trim();
  if (missing) return { error: `topic template "${template}" needs an event type, but the message from source ${values.source} has none (set eventTypePath on the source)`, cause: 'missing' };
  if (topic === '') return { error: `topic template "${template}" rendered an empty topic for source ${values.source}`, cause: 'empty' };
  return { topic };
}
