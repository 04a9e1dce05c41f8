/**
 * Topic routing: which destination a row's topic goes to.
 *
 * `routes[]` are tried in order and the first match wins. A `topicPattern` is anchored (it must
 * match the whole topic): `*` stands for exactly one non-empty, dot-free segment, `**` for any
 * text (possibly empty, dots included, line breaks too); every other character matches itself.
 */
import type { RouteConfig } from '../config/schema.ts';
import { ConfigError } from '../errors.ts';
import { compileTopicPattern } from '../config/topic-pattern.ts';

export { compileTopicPattern, topicPatternSource } from '../config/topic-pattern.ts';

/** Resolves a topic to a destination name; `undefined` when no route matches. */
export type Router = (topic: string) => string | undefined;

/**
 * Builds the router once (patterns are compiled here, not per call). Destination names are
 * validated by the config schema; `destinations` is accepted so a route naming an unknown
 * destination fails here rather than at delivery time.
 */
export function createRouter(routes: readonly RouteConfig[], destinations?: Readonly<Record<string, unknown>>): Router {
  const compiled = routes.map((route, index) => {
    if (destinations && !Object.hasOwn(destinations, route.destination)) {
      throw new ConfigError([{ key: `outbox.routes.${index}.destination`, message: `names destination "${route.destination}", which is not defined under destinations` }]);
    }
    return { regex: compileTopicPattern(route.topicPattern), destination: route.destination };
  });
  return (topic) => compiled.find((route) => route.regex.test(topic))?.destination;
}
