import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { loadConfig } from '../../lib/config/load-config.ts';
import { METRIC_NAMES, METRICS, type MetricKey } from '../../lib/observability/metric-names.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { alarmResources } from '../../lib/serverless/alarms.ts';
import { CONFIG_MEANINGS } from '../../infra/config-meanings.ts';
import { dashboardBodyText } from '../../lib/serverless/dashboard.ts';
import { configKeys, renderConfigurationDoc, renderMetricsDoc } from '../../infra/reference-docs.ts';

const config = loadConfig({ path: 'test/deploy/fixtures/queuebox.yml', env: {} });

describe('reference docs and monitoring agree with the code', () => {
  it('docs/configuration.md is the output of the generator (every schema key, type and default)', () => {
    assert.equal(readFileSync('docs/configuration.md', 'utf8'), renderConfigurationDoc(), 'run `npm run docs:reference`');
  });

  it('every documented meaning names a key the schema still has', () => {
    const keys = new Set(configKeys().map((r) => r.key));
    assert.deepEqual(Object.keys(CONFIG_MEANINGS).filter((k) => !keys.has(k)), []);
  });

  it('docs/metrics.md lists exactly the metrics of METRICS', () => {
    const text = readFileSync('docs/metrics.md', 'utf8');
    assert.equal(text, renderMetricsDoc(), 'run `npm run docs:reference`');
    const listed = [...text.matchAll(/^\| `(queuebox_[a-z_]+)` \|/gm)].map((m) => m[1]);
    assert.deepEqual([...listed].sort(), [...METRIC_NAMES].sort());
  });

  it('every metric the dashboard or an alarm names is one the code emits', () => {
    const named = [...dashboardBodyText(config).matchAll(/queuebox_[a-z_]+/g)].map((m) => m[0]);
    for (const alarm of Object.values(alarmResources(config)) as Array<{ Properties: { Namespace: string; MetricName: string } }>) {
      if (alarm.Properties.Namespace === config.observability.namespace) named.push(alarm.Properties.MetricName);
    }
    assert.ok(named.length > 10);
    for (const name of named) assert.ok(METRIC_NAMES.includes(name as never), `${name} is in METRICS`);
  });

  it('the dashboard\'s metric searches name the namespace in double quotes, as CloudWatch requires for one with spaces or a slash', () => {
    const spaced = loadConfig({ input: { database: { url: 'postgres://db/app' }, observability: { namespace: 'My Team/QueueBox' } }, env: {} });
    const searches = [...dashboardBodyText(spaced).matchAll(/SEARCH\('\{([^,]+),/g)].map((m) => m[1]);
    assert.ok(searches.length > 0, 'the dashboard has metric searches');
    for (const schema of searches) assert.equal(JSON.parse(`"${schema}"`), '"My Team/QueueBox"');
  });

  it('each alarm queries the exact namespace and dimension set of the EMF line QueueBoxMetrics writes', () => {
    for (const alarm of Object.values(alarmResources(config)) as Array<{ Properties: { Namespace: string; MetricName: string; Dimensions: Array<{ Name: string; Value: string }> } }>) {
      const p = alarm.Properties;
      if (p.Namespace === 'AWS/Lambda') continue;
      const key = (Object.keys(METRICS) as MetricKey[]).find((k) => METRICS[k].name === p.MetricName)!;
      const own = Object.fromEntries(p.Dimensions.filter((d) => d.Name !== 'service').map((d) => [d.Name, d.Value]));
      const lines: string[] = [];
      const metrics = new QueueBoxMetrics({ namespace: config.observability.namespace, serviceName: config.observability.serviceName, write: (l) => lines.push(l) });
      metrics.count(key, 1, own);
      metrics.flush();
      const emf = JSON.parse(lines[0]!) as Record<string, unknown> & { _aws: { CloudWatchMetrics: Array<{ Namespace: string; Dimensions: string[][] }> } };
      const directive = emf._aws.CloudWatchMetrics[0]!;
      assert.equal(directive.Namespace, p.Namespace);
      assert.deepEqual([...directive.Dimensions[0]!].sort(), p.Dimensions.map((d) => d.Name).sort(), `${p.MetricName} dimension set`);
      for (const d of p.Dimensions) assert.equal(emf[d.Name], d.Value, `${p.MetricName} ${d.Name} value`);
    }
  });

  it("docs/deploy.md's monthly cost counts the alarms the plugin creates, and prices them at $0.10 each beyond the free 10", () => {
    // The alarms do not depend on the configuration, only on the schedules (a heartbeat per
    // scheduled pass): the defaults are what the cost section prices.
    const count = Object.keys(alarmResources(config)).length;
    const page = readFileSync('docs/deploy.md', 'utf8');
    const row = /^\| Alarms \| (\d+) standard alarms, one metric each \| \$(\d+\.\d\d) \|$/m.exec(page);
    assert.ok(row, 'the CloudWatch table has an Alarms row');
    assert.deepEqual([Number(row[1]), row[2]], [count, (count * 0.1).toFixed(2)]);
    const beyondFree = /\$(\d+\.\d\d) for (\d+) alarms/.exec(page);
    assert.ok(beyondFree, 'the free-tier sentence prices the alarms beyond the free 10');
    assert.deepEqual([Number(beyondFree[2]), beyondFree[1]], [count - 10, ((count - 10) * 0.1).toFixed(2)]);
  });
});

/** Markdown files users read: the README and every page under docs/. */
function markdownFiles(dir = 'docs'): string[] {
  const out = dir === 'docs' ? ['README.md'] : [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...markdownFiles(path));
    else if (entry.name.endsWith('.md')) out.push(path);
  }
  return out;
}

/** Files whose text (docs, code comments) users read: Markdown plus the sources of these folders. */
function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (/\.(ts|js|md|sql|yml)$/.test(entry.name)) out.push(path);
  }
  return out;
}

describe('docs speak to users', () => {
  // Words that only mean something inside the team's own tracker and work log.
  const internal = [/\bsession \d/i, /\bissue\s*#?\d/i, /(^|[\s(])#\d+[\s).,:]/m, /\bintegrator\b/i];

  it('no page, code comment or test names an internal work session or tracker issue', () => {
    const files = [...markdownFiles(), ...['lib', 'functions', 'infra', 'bin', 'bench', 'test'].flatMap((d) => sourceFiles(d))].filter(
      (f) => f !== 'test/deploy/docs.test.ts',
    );
    assert.ok(files.length > 100);
    const found: string[] = [];
    for (const file of files) {
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (internal.some((p) => p.test(line))) found.push(`${file}:${i + 1}: ${line.trim()}`);
        });
    }
    assert.deepEqual(found, []);
  });

  it('the wording check catches what it is meant to catch', () => {
    for (const line of ['results of session 3', 'Targets (issue 4)', 'see #17 for details', 'the integrator merges it']) {
      assert.ok(internal.some((p) => p.test(line)), line);
    }
    for (const line of ['database session state', 'a lock this session still holds', '# Heading', 'color #1f77b4;']) {
      assert.ok(!internal.some((p) => p.test(line)), line);
    }
  });

  it('every Mermaid block is a known diagram type whose statements are well formed', () => {
    const blocks = markdownFiles().flatMap((file) => [...readFileSync(file, 'utf8').matchAll(/```mermaid\n([\s\S]*?)```/g)].map((m) => ({ file, text: m[1]! })));
    assert.ok(blocks.length >= 5, `architecture and three state machines in docs, one diagram in the README: ${blocks.length}`);
    assert.ok(blocks.some((b) => b.file === 'README.md'));
    for (const { file, text } of blocks) assert.deepEqual(mermaidProblems(text), [], `${file}:\n${text}`);
  });

  it('the Mermaid check refuses broken diagrams', () => {
    assert.notDeepEqual(mermaidProblems('flowchart LR\n  a["open --> b\n'), []);
    assert.notDeepEqual(mermaidProblems('stateDiagram-v2\n  pending -> sent\n'), []);
    assert.notDeepEqual(mermaidProblems('flowchart LR\n  subgraph x\n  a --> b\n'), []);
    assert.notDeepEqual(mermaidProblems('piechart\n  "a": 1\n'), []);
    assert.notDeepEqual(mermaidProblems('stateDiagram-v2\n  [*] --> pending\n  pending --> sent\n'), [], 'a state with no way out that is not final');
  });

  it('the architecture page shows the rendered dashboard, and the image is a PNG', () => {
    const page = readFileSync('docs/architecture.md', 'utf8');
    const image = /!\[[^\]]+\]\((images\/dashboard\.png)\)/.exec(page);
    assert.ok(image, 'the page embeds docs/images/dashboard.png');
    const png = readFileSync(`docs/${image[1]}`);
    assert.deepEqual([...png.subarray(1, 4)], [0x50, 0x4e, 0x47], 'PNG signature');
    assert.ok(png.readUInt32BE(16) >= 1000 && png.readUInt32BE(20) >= 600, 'a full-size picture');
  });
});

/**
 * Structural checks of a Mermaid diagram (no renderer): a known diagram type; balanced quotes,
 * brackets and `subgraph … end`; state diagram lines that are transitions, notes or blocks, and
 * every state reachable from `[*]` able to leave or end; flowchart lines that are nodes, edges
 * or blocks.
 */
function mermaidProblems(text: string): string[] {
  const lines = text.split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('%%'));
  const problems: string[] = [];
  const type = lines[0] ?? '';
  if (!/^(flowchart|graph) (LR|RL|TD|TB|BT)$|^stateDiagram-v2$|^sequenceDiagram$/.test(type)) return [`unknown diagram type: ${type}`];
  let depth = 0;
  for (const line of lines.slice(1)) {
    if ((line.match(/"/g) ?? []).length % 2 !== 0) problems.push(`unbalanced quotes: ${line}`);
    const bare = line.replace(/"[^"]*"/g, '""');
    for (const [open, close] of [['[', ']'], ['(', ')'], ['{', '}']] as const) {
      if (bare.split(open).length !== bare.split(close).length && !(open === '{' && /^state .+\{$/.test(bare))) problems.push(`unbalanced ${open}${close}: ${line}`);
    }
    if (/^subgraph\b/.test(line) || /^state .+\{$/.test(line)) depth++;
    if (line === 'end' || line === '}') depth--;
  }
  if (depth !== 0) problems.push('unclosed subgraph or state block');
  if (type === 'stateDiagram-v2') {
    const edges: Array<[string, string]> = [];
    for (const line of lines.slice(1)) {
      const m = /^(\[\*\]|[A-Za-z_][\w]*) --> (\[\*\]|[A-Za-z_][\w]*)(: .+)?$/.exec(line);
      if (m) edges.push([m[1]!, m[2]!]);
      else if (!/^(state |note |[{}]$)/.test(line)) problems.push(`not a state transition: ${line}`);
    }
    const states = new Set(edges.flat().filter((s) => s !== '[*]'));
    for (const state of states) {
      if (!edges.some(([from, to]) => from === state && to !== state)) problems.push(`state ${state} has no way out and does not end`);
    }
  } else if (type.startsWith('flowchart') || type.startsWith('graph')) {
    for (const line of lines.slice(1)) {
      if (/^(subgraph\b|end$|direction |classDef |class |style |linkStyle |click )/.test(line)) continue;
      const bare = line.replace(/"[^"]*"/g, '""').replace(/\|[^|]*\|/g, '');
      const node = String.raw`[A-Za-z_][\w]*(\[\(""\)\]|\[""\]|\(""\)|\(\(""\)\)|\{""\})?`;
      const edge = String.raw`\s*(--\s*""\s*-->|-->|-\.->|-\.\s*""\s*\.->|==>|---)\s*`;
      if (!new RegExp(`^${node}(${edge}${node})*$`).test(bare)) problems.push(`not a node or edge statement: ${line}`);
    }
  }
  return problems;
}
