/**
 * The shell blocks of the Markdown docs and how each one is to be run, read from the HTML comment
 * on the line right before its fence (blank lines between are allowed):
 *
 * - `<!-- run: clone -->`, `<!-- run: app -->`, `<!-- run: service -->`: run literally in that
 *   context (see `docs-runner.ts`); modifiers after commas:
 *   `interrupt after 20s` (each command on its own, SIGINT after that long, a clean exit expected)
 *   or `interrupt 20s after "text"` (the same, counted from when the output first shows text),
 *   `with NAME` (a variable the prose tells the user to set; `…DATABASE_URL` names get a fresh
 *   database) or `with NAME=value`, `expect "text"` (the output must contain text; no commas).
 * - `<!-- run: ci -->`: `.ci/run` runs exactly these commands after `npm ci`.
 * - `<!-- not run: <reason> -->`: not run (the reason says what it needs, e.g. an AWS account).
 * - `<!-- file: NAME -->` before a block (```yaml for `serverless.yml`, `queuebox.yml`): a file of
 *   the service context (or of the app context), written for the shell blocks after it in the same file.
 */

/** Languages whose fenced blocks are shell commands a user types. */
export const SHELL_LANGUAGES = new Set(['bash', 'sh', 'shell']);

/** The contexts a block can run in. */
export type RunContext = 'clone' | 'app' | 'service' | 'ci';

/** How one block is run, as its comment says. */
export type BlockPlan =
  | { kind: 'run'; context: RunContext; interruptAfterMs?: number; interruptAfterText?: string; env: Array<{ name: string; value?: string }>; expect?: string }
  | { kind: 'not run'; reason: string }
  | { kind: 'missing'; problem: string };

/** A fenced shell block of a Markdown file. */
export interface ShellBlock {
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  code: string;
  plan: BlockPlan;
  /** The `## ` heading the block is under ('' before the first). */
  section: string;
  /** The service (or app) context's files: for each name, the closest preceding block annotated `<!-- file: NAME -->` in the same file. */
  serviceFiles: Record<string, string>;
}

const CONTEXTS: RunContext[] = ['clone', 'app', 'service', 'ci'];

/** Parses the text of a `<!-- … -->` comment (without the markers) into a plan. */
export function parsePlan(comment: string | undefined): BlockPlan {
  if (comment === undefined) return { kind: 'missing', problem: 'no <!-- run: … --> or <!-- not run: … --> comment before the block' };
  const notRun = /^not run:\s*(\S.*)$/.exec(comment);
  if (notRun) return { kind: 'not run', reason: notRun[1]!.trim() };
  const run = /^run:\s*(.*)$/.exec(comment);
  if (!run) return { kind: 'missing', problem: `comment "${comment}" is neither "run: …" nor "not run: …"` };
  const [context, ...modifiers] = run[1]!.split(',').map((p) => p.trim());
  if (!CONTEXTS.includes(context as RunContext)) {
    return { kind: 'missing', problem: `unknown context "${context}" (expected one of ${CONTEXTS.join(', ')})` };
  }
  const plan: BlockPlan = { kind: 'run', context: context as RunContext, env: [] };
  for (const modifier of modifiers) {
    const interrupt = /^interrupt after (\d+)s$/.exec(modifier) ?? /^interrupt (\d+)s after "([^"]+)"$/.exec(modifier);
    const withVar = /^with ([A-Z_][A-Z0-9_]*)(?:=(.*))?$/.exec(modifier);
    const expect = /^expect "([^"]+)"$/.exec(modifier);
    if (interrupt) {
      plan.interruptAfterMs = Number(interrupt[1]) * 1000;
      if (interrupt[2] !== undefined) plan.interruptAfterText = interrupt[2];
    }
    else if (expect) plan.expect = expect[1];
    else if (withVar) plan.env.push({ name: withVar[1]!, value: withVar[2] });
    else return { kind: 'missing', problem: `unknown modifier "${modifier}" (expected "interrupt after <n>s", 'interrupt <n>s after "text"', "with NAME[=value]" or 'expect "text"')` };
  }
  return plan;
}

/** The shell blocks of one Markdown text, each with its plan. */
export function shellBlocks(file: string, text: string): ShellBlock[] {
  const lines = text.split('\n');
  const blocks: ShellBlock[] = [];
  const serviceFiles: Record<string, string> = {};
  let section = '';
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.startsWith('## ')) section = lines[i]!.slice(3).trim();
    const fence = /^```(\w*)\s*$/.exec(lines[i]!);
    if (!fence) continue;
    const end = lines.findIndex((l, j) => j > i && /^```\s*$/.test(l));
    if (end < 0) break;
    const code = lines.slice(i + 1, end).join('\n');
    const comment = commentBefore(lines, i);
    const lang = fence[1]!;
    const fileName = comment === undefined ? null : /^file:\s*([\w.-]+)$/.exec(comment);
    if (fileName) serviceFiles[fileName[1]!] = code + '\n';
    if (SHELL_LANGUAGES.has(lang)) blocks.push({ file, line: i + 1, code, plan: parsePlan(comment), section, serviceFiles: { ...serviceFiles } });
    i = end;
  }
  return blocks;
}

function commentBefore(lines: string[], fenceIndex: number): string | undefined {
  let j = fenceIndex - 1;
  while (j >= 0 && lines[j]!.trim() === '') j--;
  const match = j >= 0 ? /^<!--\s*(.*?)\s*-->$/.exec(lines[j]!.trim()) : null;
  return match ? match[1] : undefined;
}

/**
 * The commands of a block, one per entry: `\`-continued lines joined, blank and comment-only lines
 * dropped (a trailing `# comment` stays: bash ignores it).
 */
export function blockCommands(code: string): string[] {
  const commands: string[] = [];
  let current = '';
  for (const line of code.split('\n')) {
    if (current === '' && (line.trim() === '' || line.trim().startsWith('#'))) continue;
    current += line;
    if (line.endsWith('\\')) current = current.slice(0, -1) + ' ';
    else {
      commands.push(current.trim());
      current = '';
    }
  }
  if (current.trim() !== '') commands.push(current.trim());
  return commands;
}
