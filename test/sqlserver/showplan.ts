/**
 * Reads SQL Server actual execution plans (`SET STATISTICS XML ON`: one showplan XML document per
 * statement) into the operators that touch a table, and names what a claim must not do: scan the
 * table, or read more rows than its bound. Used by `live-plans.test.ts`; checked on sample plans
 * by `showplan.test.ts` (no server needed).
 */

/** One plan operator (RelOp) that reads or writes a table's index. */
export interface PlanAccess {
  /** 1-based statement number within the batch, and the statement's first words. */
  statement: number;
  statementText: string;
  /** PhysicalOp, or `Key Lookup` for a clustered index seek marked `Lookup="1"`. */
  op: string;
  logicalOp: string;
  schema: string;
  table: string;
  /** Index name without brackets; '' for a heap. */
  index: string;
  estimateRows: number;
  /** Summed over threads; undefined in an estimated plan. */
  actualRows?: number;
  /** `ActualRowsRead` where the server reports it (2016 SP1 and later), else the actual rows. */
  rowsRead?: number;
  executions?: number;
}

const unbracket = (name: string | undefined) => (name ?? '').replace(/^\[|\]$/g, '');

function attributes(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of text.matchAll(/([\w:]+)="([^"]*)"/g)) out[m[1]!] = decode(m[2]!);
  return out;
}

function decode(value: string): string {
  return value.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&apos;/g, "'").replace(/&#x([0-9a-f]+);/gi, (_, h: string) => String.fromCodePoint(parseInt(h, 16))).replace(/&amp;/g, '&');
}

interface Frame {
  attrs: Record<string, string>;
  object?: Record<string, string>;
  lookup: boolean;
  rows?: number;
  read?: number;
  executions?: number;
}

/** The operators of `xmlPlans` (each a showplan document) that access an index of a table. */
export function planAccesses(xmlPlans: string[]): PlanAccess[] {
  const out: PlanAccess[] = [];
  let statement = 0;
  for (const xml of xmlPlans) {
    let statementText = '';
    const stack: Frame[] = [];
    for (const m of xml.matchAll(/<(\/?)([\w:]+)((?:\s+[\w:]+="[^"]*")*)\s*(\/?)>/g)) {
      const [, closing, tag, attrText, selfClosing] = m;
      const name = tag!.replace(/^\w+:/, '');
      if (!closing && name.startsWith('Stmt')) {
        statement += 1;
        statementText = (attributes(attrText!).StatementText ?? '').replace(/\s+/g, ' ').trim().slice(0, 160);
      }
      if (name === 'RelOp') {
        if (closing) {
          const f = stack.pop()!;
          if (f.object?.Table) {
            out.push({
              statement,
              statementText,
              op: f.lookup ? 'Key Lookup' : f.attrs.PhysicalOp ?? '',
              logicalOp: f.attrs.LogicalOp ?? '',
              schema: unbracket(f.object.Schema),
              table: unbracket(f.object.Table),
              index: unbracket(f.object.Index),
              estimateRows: Number(f.attrs.EstimateRows ?? 0),
              ...(f.rows !== undefined ? { actualRows: f.rows, rowsRead: f.read ?? f.rows, executions: f.executions ?? 0 } : {}),
            });
          }
        } else if (!selfClosing) {
          stack.push({ attrs: attributes(attrText!), lookup: false });
        }
        continue;
      }
      const top = stack.at(-1);
      if (!top || closing) continue;
      const a = attributes(attrText!);
      if (name === 'RunTimeCountersPerThread') {
        top.rows = (top.rows ?? 0) + Number(a.ActualRows ?? 0);
        if (a.ActualRowsRead !== undefined) top.read = (top.read ?? 0) + Number(a.ActualRowsRead);
        top.executions = (top.executions ?? 0) + Number(a.ActualExecutions ?? 0);
      } else if (name === 'IndexScan' || name === 'TableScan') {
        if (a.Lookup === '1' || a.Lookup === 'true') top.lookup = true;
      } else if (name === 'Object' && top.object === undefined && /^\[/.test(a.Table ?? '')) {
        top.object = a;
      }
    }
  }
  return out.filter((a) => !a.table.startsWith('@') && !a.table.startsWith('#'));
}

/** One line per access, for a human: statement, operator, index, rows. */
export function formatAccesses(accesses: PlanAccess[]): string {
  return accesses
    .map((a) => {
      const counts = a.actualRows === undefined ? `estimated ${a.estimateRows} rows` : `${a.actualRows} rows, ${a.rowsRead} read, ${a.executions} executions (estimated ${a.estimateRows})`;
      return `stmt ${a.statement} ${a.op} ${a.table}${a.index ? `.${a.index}` : ''}: ${counts}   [${a.statementText}]`;
    })
    .join('\n');
}

/** What a claim's plan must not contain; each problem names the operator. */
export function planProblems(accesses: PlanAccess[], o: { table: string; maxScanRowsRead: number; maxTotalRowsRead: number }): string[] {
  const own = accesses.filter((a) => a.table === o.table);
  const problems: string[] = [];
  for (const a of own) {
    if (a.op === 'Table Scan' || a.op === 'Clustered Index Scan') problems.push(`stmt ${a.statement}: ${a.op} of ${a.table}${a.index ? `.${a.index}` : ''} (${a.rowsRead ?? a.estimateRows} rows read)`);
    else if (a.op === 'Index Scan' && (a.rowsRead ?? a.estimateRows) > o.maxScanRowsRead) problems.push(`stmt ${a.statement}: Index Scan of ${a.table}.${a.index} reads ${a.rowsRead ?? a.estimateRows} rows (at most ${o.maxScanRowsRead})`);
  }
  const total = own.reduce((sum, a) => sum + (a.rowsRead ?? 0), 0);
  if (total > o.maxTotalRowsRead) problems.push(`the statements read ${total} rows of ${o.table} in all (at most ${o.maxTotalRowsRead})`);
  return problems;
}
