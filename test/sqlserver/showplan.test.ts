/**
 * The plan reader of the live plan case (`showplan.ts`), on showplan XML of the shape
 * `SET STATISTICS XML ON` returns (nested RelOps, per-thread run-time counters, key lookups,
 * table variables): what it finds, and that it names a scan of the table and an over-read.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatAccesses, planAccesses, planProblems } from './showplan.ts';

const NS = 'xmlns="http://schemas.microsoft.com/sqlserver/2004/07/showplan" Version="1.564" Build="16.0.4165.4"';
const obj = (table: string, index: string, extra = '') => `<Object Database="[queuebox_live_rcsi_on]" Schema="[qb_test_1]" Table="[${table}]" Index="[${index}]" Alias="[r]" IndexKind="NonClustered" Storage="RowStore"${extra}/>`;
const counters = (rows: number, read: number | undefined, executions: number, threads = 1) =>
  `<RunTimeInformation>${Array.from({ length: threads }, (_, i) => `<RunTimeCountersPerThread Thread="${i}" ActualRows="${rows / threads}"${read === undefined ? '' : ` ActualRowsRead="${read / threads}"`} ActualEndOfScans="1" ActualExecutions="${executions / threads}"/>`).join('')}</RunTimeInformation>`;
const seek = (op: string, table: string, index: string, rows: number, read: number | undefined, executions: number, lookup = false) =>
  `<RelOp NodeId="9" PhysicalOp="${op}" LogicalOp="${op === 'Index Scan' ? 'Index Scan' : lookup ? 'Clustered Index Seek' : 'Index Seek'}" EstimateRows="1" EstimateIO="0.003125">
     <OutputList><ColumnReference Database="[queuebox_live_rcsi_on]" Schema="[qb_test_1]" Table="[${table}]" Alias="[r]" Column="id"/></OutputList>
     ${counters(rows, read, executions)}
     <IndexScan Ordered="1" ScanDirection="FORWARD" ForcedIndex="0" ForceSeek="0"${lookup ? ' Lookup="1"' : ''} NoExpandHint="0" Storage="RowStore">
       <DefinedValues><DefinedValue><ColumnReference Table="[${table}]" Column="id"/></DefinedValue></DefinedValues>
       ${obj(table, index, ' Filtered="1"')}
       <SeekPredicates><SeekPredicateNew><SeekKeys><Prefix ScanType="EQ"><RangeColumns><ColumnReference Column="key"/></RangeColumns><RangeExpressions><ScalarOperator ScalarString="[k].[v] &gt; N&apos;a&apos;"/></RangeExpressions></Prefix></SeekKeys></SeekPredicateNew></SeekPredicates>
     </IndexScan>
   </RelOp>`;
const statement = (n: number, text: string, body: string) =>
  `<?xml version="1.0" encoding="utf-16"?><ShowPlanXML ${NS}><BatchSequence><Batch><Statements><StmtSimple StatementText="${text}" StatementId="${n}" StatementType="INSERT"><QueryPlan DegreeOfParallelism="1">${body}</QueryPlan></StmtSimple></Statements></Batch></BatchSequence></ShowPlanXML>`;

const pick = statement(
  1,
  'WITH open_keys AS (SELECT MIN(k.[key]) AS v FROM [qb_test_1].[outbox] AS k WITH (READCOMMITTEDLOCK, READPAST) WHERE k.state &gt;= N&apos;p&apos;',
  `<RelOp NodeId="0" PhysicalOp="Table Insert" LogicalOp="Insert" EstimateRows="10">
     <OutputList/>${counters(10, undefined, 1)}
     <Update DMLRequestSort="0"><Object Table="[@v_picked]" Storage="RowStore"/>
       <RelOp NodeId="1" PhysicalOp="Nested Loops" LogicalOp="Inner Join" EstimateRows="10"><OutputList/>${counters(10000, undefined, 1)}
         <NestedLoops Optimized="0">
           ${seek('Index Scan', 'outbox', 'outbox_key_head_idx', 1, 1, 1)}
           ${seek('Index Seek', 'outbox', 'outbox_key_head_idx', 10000, 10000, 10000)}
           ${seek('Clustered Index Seek', 'outbox', 'outbox_sequence_idx', 10000, 10000, 10000, true)}
           ${seek('Index Seek', 'outbox', 'outbox_key_processing_idx', 0, 0, 10000)}
         </NestedLoops>
       </RelOp>
     </Update>
   </RelOp>`,
);
const update = statement(
  2,
  'UPDATE o SET state = N&apos;processing&apos;',
  `<RelOp NodeId="0" PhysicalOp="Clustered Index Update" LogicalOp="Update" EstimateRows="10"><OutputList/>${counters(10, undefined, 1)}
     <Update WithOrderedPrefetch="1" DMLRequestSort="0">${obj('outbox', 'outbox_sequence_idx')}${obj('outbox', 'outbox_pending_idx')}
       <RelOp NodeId="1" PhysicalOp="Nested Loops" LogicalOp="Inner Join" EstimateRows="10"><OutputList/>${counters(10, undefined, 1)}
         <NestedLoops Optimized="0">
           <RelOp NodeId="2" PhysicalOp="Clustered Index Scan" LogicalOp="Clustered Index Scan" EstimateRows="10"><OutputList/>${counters(10, 10, 1)}
             <IndexScan Ordered="0"><Object Table="[@v_picked]" Index="[PK__#B1234]" IndexKind="Clustered"/></IndexScan></RelOp>
           ${seek('Index Seek', 'outbox', 'outbox_pkey', 10, 10, 10)}
         </NestedLoops>
       </RelOp>
     </Update>
   </RelOp>`,
);

describe('reading actual plans (showplan XML)', () => {
  it('finds each operator on the table with its statement, index and summed run-time counters; table variables are left out', () => {
    const accesses = planAccesses([pick, update]);
    assert.deepEqual(
      accesses.map((a) => [a.statement, a.op, a.table, a.index, a.actualRows, a.rowsRead, a.executions]),
      [
        [1, 'Index Scan', 'outbox', 'outbox_key_head_idx', 1, 1, 1],
        [1, 'Index Seek', 'outbox', 'outbox_key_head_idx', 10000, 10000, 10000],
        [1, 'Key Lookup', 'outbox', 'outbox_sequence_idx', 10000, 10000, 10000],
        [1, 'Index Seek', 'outbox', 'outbox_key_processing_idx', 0, 0, 10000],
        [2, 'Index Seek', 'outbox', 'outbox_pkey', 10, 10, 10],
        [2, 'Clustered Index Update', 'outbox', 'outbox_sequence_idx', 10, 10, 1],
      ],
    );
    assert.match(accesses[0]!.statementText, /^WITH open_keys AS \(SELECT MIN\(k\.\[key\]\) AS v FROM \[qb_test_1\]\.\[outbox\] AS k WITH \(READCOMMITTEDLOCK, READPAST\) WHERE k\.state >= N'p'/);
    assert.match(formatAccesses(accesses), /^stmt 1 Index Scan outbox\.outbox_key_head_idx: 1 rows, 1 read, 1 executions \(estimated 1\)/);
    assert.deepEqual(planProblems(accesses, { table: 'outbox', maxScanRowsRead: 10_000, maxTotalRowsRead: 100_000 }), []);
  });

  it('sums counters over threads, and falls back to actual rows where the server has no ActualRowsRead', () => {
    const parallel = statement(1, 'SELECT', `<RelOp NodeId="0" PhysicalOp="Index Scan" LogicalOp="Index Scan" EstimateRows="5">${counters(400, undefined, 4, 4)}<IndexScan>${obj('outbox', 'outbox_pending_idx')}</IndexScan></RelOp>`);
    assert.deepEqual(planAccesses([parallel]).map((a) => [a.actualRows, a.rowsRead, a.executions]), [[400, 400, 4]]);
  });

  it('names a scan of the table, an index scan over its bound, and an over-read in all', () => {
    const scan = statement(
      1,
      'SELECT',
      `<RelOp NodeId="0" PhysicalOp="Clustered Index Scan" LogicalOp="Clustered Index Scan" EstimateRows="1000000">${counters(100, 1_000_000, 1)}<IndexScan Ordered="0">${obj('outbox', 'outbox_sequence_idx')}</IndexScan></RelOp>`,
    );
    const heap = statement(2, 'SELECT', `<RelOp NodeId="0" PhysicalOp="Table Scan" LogicalOp="Table Scan" EstimateRows="7"><TableScan Ordered="0"><Object Table="[outbox]" Schema="[s]"/></TableScan></RelOp>`);
    const wide = statement(3, 'SELECT', `<RelOp NodeId="0" PhysicalOp="Index Scan" LogicalOp="Index Scan" EstimateRows="9">${counters(10, 50_000, 1)}<IndexScan>${obj('outbox', 'outbox_key_head_idx')}</IndexScan></RelOp>`);
    const other = statement(4, 'SELECT', `<RelOp NodeId="0" PhysicalOp="Clustered Index Scan" LogicalOp="Clustered Index Scan" EstimateRows="9">${counters(10, 50, 1)}<IndexScan>${obj('inbox', 'inbox_sequence_idx')}</IndexScan></RelOp>`);
    assert.deepEqual(planProblems(planAccesses([scan, heap, wide, other]), { table: 'outbox', maxScanRowsRead: 10_000, maxTotalRowsRead: 100_000 }), [
      'stmt 1: Clustered Index Scan of outbox.outbox_sequence_idx (1000000 rows read)',
      'stmt 2: Table Scan of outbox (7 rows read)',
      'stmt 3: Index Scan of outbox.outbox_key_head_idx reads 50000 rows (at most 10000)',
      'the statements read 1050000 rows of outbox in all (at most 100000)',
    ]);
  });
});
