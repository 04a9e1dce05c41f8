/**
 * The summary table of a fault run (Markdown, so it can be pasted into docs/reliability.md).
 */
import type { FaultRunResult } from './fault-run.ts';

/** Renders the run as a Markdown table plus the violations, if any. */
export function formatFaultTable(r: FaultRunResult): string {
  const st = r.report.stats;
  const lines: Array<[string, string | number]> = [
    ['seed', r.seed],
    ['profile', r.profile],
    ['database', r.database],
    ['messages (outbox + push inbox + pull inbox)', `${r.messages} (${st.outboxRows - st.pushRows} + ${st.pushRows} + ${st.pullRows})`],
    ['outbox rows (incl. relayed)', st.outboxRows],
    ['invocations (outbox / relay / pull)', `${r.invocations.outbox} / ${r.invocations.relay} / ${r.invocations.pull}`],
    ['duration', `${(r.durationMs / 1000).toFixed(1)} s`],
    ...Object.entries(r.faults).map(([k, v]): [string, number] => [`fault: ${k}`, v]),
    ['outbox sent / dead', `${st.sent} / ${st.dead}`],
    ['deliveries accepted by the destination', st.deliveries],
    ['duplicate deliveries (rows)', `${st.duplicateDeliveries} (${st.rowsDuplicated})`],
    ['outbox claims (audited)', st.claims],
    ['outbox reclaims (audited)', st.reclaimsAudited],
    ['queuebox_outbox_messages_reclaimed_total', r.counters.outboxReclaimed],
    ['queuebox_claims_lost_total{outbox}', r.counters.outboxClaimsLost],
    ['queuebox_claims_lost_total{inbox}', r.counters.inboxClaimsLost],
    ['queuebox_claims_lost_total{pull}', r.counters.pullClaimsLost],
    ['violations', r.report.violationCount],
  ];
  const out = ['| what | value |', '| --- | --- |', ...lines.map(([k, v]) => `| ${k} | ${v} |`)];
  for (const [kind, v] of r.report.violations) out.push(`VIOLATION ${kind}: ${v.count} (e.g. ${v.examples.join('; ')})`);
  return out.join('\n');
}
