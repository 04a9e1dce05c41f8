/**
 * `npm run test:faults`: one fault run of configurable size, printing the summary table; exits 1
 * on any violation. Uses `DATABASE_URL`, or starts an embedded PostgreSQL when it is unset.
 *
 * Environment: `QUEUEBOX_FAULTS_SEED` (default: random, printed), `FAULTS_MESSAGES` (default
 * 5000), `FAULTS_MAX_RUN_MS` (default 20 minutes), `FAULTS_OUTBOX_WORKERS`, `FAULTS_RELAY_WORKERS`,
 * `FAULTS_PULL_WORKERS` (invocations of each kind at once; default 3 / 2 / 2), `FAULTS_PUSH_SHARE`,
 * `FAULTS_PULL_SHARE` (shares of push and pull inbox rows; default 0.25 / 0.15), `FAULTS_PROFILE`
 * (`default`, `short-lease`, `frozen-pull`; see fault-profiles.ts).
 * Arguments: `--messages N`, `--seed N`, `--profile NAME`, `--rows-per-key N` (`outbox.rowsPerKey`;
 * FAULTS_ROWS_PER_KEY) override the environment.
 *
 * Ctrl-C (SIGINT) or SIGTERM drops the run's schema before the process exits (130 / 143).
 */
import { startEmbeddedDatabase, type EmbeddedDatabase } from '../../lib/local/embedded-database.ts';
import type { FaultProfile } from './fault-profiles.ts';
import { runFaults } from './fault-run.ts';
import { formatFaultTable } from './format-fault-table.ts';
import { dropSchemasOnSignal } from '../helpers/drop-on-signal.ts';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}
const num = (value: string | undefined, fallback: number) => (value === undefined || value === '' ? fallback : Number(value));

const seed = num(arg('seed') ?? process.env.QUEUEBOX_FAULTS_SEED, Math.floor(Math.random() * 2 ** 31));
const messages = num(arg('messages') ?? process.env.FAULTS_MESSAGES, 5000);
const rowsPerKey = arg('rows-per-key') ?? process.env.FAULTS_ROWS_PER_KEY;
const profile = (arg('profile') ?? process.env.FAULTS_PROFILE ?? 'default') as FaultProfile;
if (!['default', 'short-lease', 'frozen-pull'].includes(profile)) {
  console.error(`unknown fault profile ${profile}: use default, short-lease or frozen-pull`);
  process.exit(2);
}
dropSchemasOnSignal();
let embedded: EmbeddedDatabase | undefined;
if (!process.env.DATABASE_URL) {
  embedded = await startEmbeddedDatabase();
  process.env.DATABASE_URL = embedded.adminUrl;
  console.log('# embedded PostgreSQL started (DATABASE_URL unset)');
}
const perKey = rowsPerKey === undefined || rowsPerKey === '' ? '' : ` FAULTS_ROWS_PER_KEY=${rowsPerKey}`;
console.log(`# fault run: profile ${profile}, seed ${seed}, ${messages} messages${perKey === '' ? '' : `, outbox.rowsPerKey ${rowsPerKey}`} (replay with FAULTS_PROFILE=${profile} QUEUEBOX_FAULTS_SEED=${seed} FAULTS_MESSAGES=${messages}${perKey})`);
let code = 1;
try {
  const result = await runFaults({
    seed,
    messages,
    profile,
    ...(perKey === '' ? {} : { rowsPerKey: Number(rowsPerKey) }),
    maxRunMs: num(process.env.FAULTS_MAX_RUN_MS, 20 * 60_000),
    outboxWorkers: num(process.env.FAULTS_OUTBOX_WORKERS, 3),
    relayWorkers: num(process.env.FAULTS_RELAY_WORKERS, 2),
    pullWorkers: num(process.env.FAULTS_PULL_WORKERS, 2),
    pushShare: num(process.env.FAULTS_PUSH_SHARE, 0.25),
    pullShare: num(process.env.FAULTS_PULL_SHARE, 0.15),
    log: (line) => console.log(`# ${line}`),
  });
  console.log(formatFaultTable(result));
  code = result.report.violationCount === 0 ? 0 : 1;
  console.log(code === 0 ? '1 passed, 0 failed' : '0 passed, 1 failed');
} finally {
  if (embedded) await embedded.stop();
}
process.exit(code);
