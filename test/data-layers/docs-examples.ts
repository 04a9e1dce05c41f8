/**
 * The examples of docs/data-layers.md, by heading: the TypeScript block under each `###` example
 * heading, and the pull example under `## Pull workers`; and the Prisma example's `schema.prisma`.
 * Shared by the docs test (run in this repository) and the packed-package test (type-checked and
 * run in a scratch app).
 */
import { readFileSync } from 'node:fs';

/** Heading → code of each ```ts block on the page. */
export function dataLayerExamples(): Map<string, string> {
  const page = readFileSync('docs/data-layers.md', 'utf8');
  const examples = new Map<string, string>();
  let heading = '';
  for (const part of page.split(/^(#{2,3} .*)$/m)) {
    if (/^#{2,3} /.test(part)) heading = part.replace(/^#+ /, '');
    for (const block of part.matchAll(/```ts\n([\s\S]*?)```/g)) examples.set(heading, block[1]!);
  }
  return examples;
}

/** The ```prisma block under `### Prisma`: the application's `prisma/schema.prisma`. */
export function dataLayerPrismaSchema(): string {
  const page = readFileSync('docs/data-layers.md', 'utf8');
  const section = page.slice(page.indexOf('### Prisma'), page.indexOf('\n### ', page.indexOf('### Prisma') + 1));
  const block = /```prisma\n([\s\S]*?)```/.exec(section);
  if (!block) throw new Error('docs/data-layers.md shows no ```prisma block under ### Prisma');
  return block[1]!;
}
