/**
 * QueueBox's PostgreSQL SQL text is ASCII only. A database whose encoding is not UTF8 is refused
 * (`serverEncodingProblem`), but that refusal and everything before it must reach such a database
 * intact, and a character of a comment or message in a statement that the database's encoding
 * has not (`…`, `→`, `—` under LATIN1) fails the statement with a raw conversion error instead.
 *
 * Three nets: every statement the driver sends while the whole conformance suite runs (outbox
 * claim functions made for its batch size), plus the outbox claims with several rows of a key (the
 * followers' claim, which the suite does not use), plus `migrate --sql`'s script; and a scan of
 * every string and template literal of lib/db/postgres/ that holds SQL, so that text not run here
 * is held to it too.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import ts from 'typescript';
import { parseConfig } from '../../lib/config/load-config.ts';
import { migrationScript } from '../../lib/db/migration-script.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { runDriverConformance } from './driver-conformance.ts';
import { createPostgresTarget } from './postgres-target.ts';

const NON_ASCII = /[^\x00-\x7F]/;

/** The line of `text` with its first non-ASCII character, for the failure message. */
function offendingLine(text: string): string {
  return text.split('\n').find((line) => NON_ASCII.test(line))!.trim();
}

/** Statement texts sent by any `pg` client of this process that hold a non-ASCII character. */
const offending = new Set<string>();
let sent = 0;
const query = pg.Client.prototype.query;
pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
  const first = args[0] as string | { text?: unknown } | undefined;
  const text = typeof first === 'string' ? first : typeof first?.text === 'string' ? first.text : '';
  sent += 1;
  if (NON_ASCII.test(text)) offending.add(offendingLine(text));
  return (query as (...a: unknown[]) => unknown).apply(this, args);
} as typeof query;

runDriverConformance('postgres, every statement ASCII', () => createPostgresTarget({ outboxBatchSize: 10 }));

describe('the outbox claims with several rows of a key (PostgreSQL)', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase({ outbox: { batchSize: 10 } });
  });
  after(async () => db.drop());

  it('claim the followers of each key', async () => {
    await db.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) SELECT 't', 'k' || (g % 3), '{}' FROM generate_series(1, 30) g`);
    // The first claims of a driver send their statement, the later ones call the function.
    const driver = db.newDriver();
    let claimed = 0;
    for (let i = 0; i < 4; i++) claimed += (await driver.outboxClaimMany({ limit: 10, leaseMs: 60_000 })).length;
    assert.ok(claimed > 3, `claimed ${claimed}: more than one row of a key`);
  });
});

describe('the SQL text of QueueBox for PostgreSQL is ASCII only', () => {
  it('in the migrate --sql script', () => {
    const script = migrationScript(parseConfig({ database: { schema: 'queuebox' } }));
    assert.ok(!NON_ASCII.test(script), NON_ASCII.test(script) ? offendingLine(script) : '');
  });

  it('in every literal of lib/db/postgres/ that holds SQL', () => {
    // A literal holds SQL when it has a keyword of a statement or clause written as QueueBox writes them.
    const sqlWord = /\b(SELECT|INSERT|UPDATE|DELETE|WITH|FROM|WHERE|RETURNING|CREATE|ALTER|DROP|COMMENT ON|RAISE|BEGIN|END|SET|JOIN|UNION|LIMIT)\b|--/;
    const found: string[] = [];
    const dir = 'lib/db/postgres';
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
      const path = join(dir, file);
      const source = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true);
      const visit = (node: ts.Node): void => {
        const parts =
          ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)
            ? [node.text]
            : ts.isTemplateExpression(node)
              ? [node.head.text, ...node.templateSpans.map((span) => span.literal.text)]
              : [];
        const text = parts.join(' ');
        if (NON_ASCII.test(text) && sqlWord.test(text)) {
          found.push(`${path}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${offendingLine(text)}`);
        }
        ts.forEachChild(node, visit);
      };
      visit(source);
    }
    assert.deepEqual(found, []);
  });
});

after(() => {
  pg.Client.prototype.query = query;
  assert.ok(sent > 1000, `only ${sent} statements were seen: the hook no longer sees the driver's statements`);
  assert.deepEqual([...offending], [], 'statements sent with a non-ASCII character');
});
