/**
 * The `queuebox` command line as a commander program, built around injectable output streams
 * and environment so tests run it in-process. `bin/queuebox.ts` runs it on `process.argv`.
 *
 * Configuration: `--config <path>`, else `QUEUEBOX_CONFIG`, plus `QUEUEBOX_*` overrides and
 * `QUEUEBOX_DATABASE_URL`/`DATABASE_URL`. Results go to stdout; progress and errors to stderr.
 * A failure prints one line without a stack (`--debug` prints the stack) and sets exit code 1;
 * a `QueueBoxError` (bad config, refused replay, missing columns) prints its own message, and
 * commander's own refusals (an unknown option or command, a bad option value) print the same
 * `queuebox: ` line, then where the help is. An option that takes one value refuses a second one;
 * the list options (`replay --id`, `--topic`, `--source`, `--state`) are repeatable.
 */
import { existsSync, readFileSync } from 'node:fs';
import { Command, InvalidArgumentError, Option } from 'commander';
import { loadConfig } from '../lib/config/load-config.ts';
import type { QueueBoxConfig } from '../lib/config/schema.ts';
import { createDriver } from '../lib/db/create-driver.ts';
import type { Driver, MigrateResult } from '../lib/db/driver.ts';
import { QueueBoxError, UsageError } from '../lib/errors.ts';
import { migrationScript } from '../lib/db/migration-script.ts';
import { reclaimNow } from '../lib/operations/reclaim-now.ts';
import { formatReplayPreview } from '../lib/operations/format-replay-preview.ts';
import { parseReplayRequest, previewReplay, REPLAY_CONFIRM_ABOVE, REPLAY_SAMPLE_SIZE, runReplayCommand, type ReplayFieldNames } from '../lib/operations/replay.ts';
import { describeCliError } from '../lib/operations/describe-cli-error.ts';
import { runRetention } from '../lib/operations/retention.ts';
import { retentionProgress } from '../lib/operations/retention-progress.ts';
import { collectStatus, formatStatus } from '../lib/operations/status.ts';
import type { InboxPutResult } from '../lib/local/local-inbox-put.ts';
import { packageVersion } from './package-version.ts';

/** The `replay` flag of each request field: a refused request names the flag the operator typed, not the field. */
const REPLAY_FLAGS: ReplayFieldNames = {
  table: '--table',
  ids: '--id',
  topics: '--topic',
  destination: '--destination',
  sources: '--source',
  consumption: '--consumption',
  createdFrom: '--created-from',
  createdTo: '--created-to',
  lastErrorPrefix: '--last-error',
  states: '--state',
};

/** Where the program writes and what it reads. */
export interface CliIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  env: Readonly<Record<string, string | undefined>>;
  /** Whether stderr is a terminal (progress then updates one line in place). */
  stderrIsTTY?: boolean;
  /** Runs the local scheduler; default: `runLocal` of `lib/local/local-runner.ts`. */
  runLocal?: (options: Record<string, unknown>) => Promise<unknown>;
}

/** Default IO: the process streams and environment. */
export function processIo(): CliIo {
  return { stdout: (t) => process.stdout.write(t), stderr: (t) => process.stderr.write(t), env: process.env, stderrIsTTY: process.stderr.isTTY === true };
}

// `--id` and `--state` also take a comma-separated list: an id or a state holds no comma.
const collect = (value: string, previous: string[] = []) => [...previous, ...value.split(',').filter((v) => v !== '')];
// `--topic` and `--source` take one exact value each time, never split: a topic may hold commas (a
// relayed topic carries the sender's event type), and its pieces may be topics of their own.
const repeat = (value: string, previous: string[] = []) => [...previous, value];
/** Parsers of the options that may be given more than once (each value adds to a list). */
const REPEATABLE: ReadonlySet<unknown> = new Set([collect, repeat]);
// `--config "$CFG"` with CFG unset gives an empty path: refused, never read as "no file" (which
// would run on the schema defaults and ignore QUEUEBOX_CONFIG).
const configPath = (value: string) => {
  if (value === '') throw new UsageError('--config needs a file path');
  return value;
};
// Commander reports an InvalidArgumentError with the option it belongs to:
// `queuebox: option '--dead-limit <n>' argument '-1' is invalid. expected a positive integer`.
const positiveNumber = (value: string) => {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('expected a positive number');
  return n;
};
const positive = (value: string) => {
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('expected a positive integer');
  return n;
};

/** Builds the program (commander throws instead of exiting; `runCli` maps that to an exit code). */
export function createProgram(io: CliIo): Command {
  const program = new Command('queuebox')
    .description('QueueBox: transactional outbox and inbox operations')
    .version(packageVersion(), '-V, --version', 'print the QueueBox version')
    .option('-c, --config <path>', 'YAML configuration file (default: $QUEUEBOX_CONFIG)', configPath)
    .option('--debug', 'print the stack of an unexpected error')
    // Commander's own refusals read like the CLI's (`queuebox: unknown option '--mesages'`), then
    // name the command's --help (pointErrorsAtHelp) instead of printing the whole help.
    .configureOutput({ writeOut: io.stdout, writeErr: io.stderr, outputError: (text, write) => write(`queuebox: ${text.replace(/^error: /, '')}`) })
    .exitOverride();

  /**
   * The configuration file: `--config`, else `QUEUEBOX_CONFIG` (read by `loadConfig`). An empty
   * QUEUEBOX_CONFIG (`QUEUEBOX_CONFIG="$CFG"` with CFG unset) is refused as an empty --config is.
   */
  const configFile = (): string | undefined => {
    const path = program.opts<{ config?: string }>().config;
    if (path === undefined && io.env.QUEUEBOX_CONFIG === '') {
      throw new UsageError('QUEUEBOX_CONFIG is set but empty: set it to the path of the configuration file, or unset it to run without one');
    }
    // A configuration file beside the command is not read unless named (the Serverless plugin
    // reads ./queuebox.yml by default; the CLI does not): said, so that `queuebox migrate` run
    // there does not go unnoticed onto the defaults (another database.schema, another table).
    if (path === undefined && io.env.QUEUEBOX_CONFIG === undefined) {
      const beside = ['queuebox.yml', 'queuebox.yaml'].find((name) => existsSync(name));
      if (beside !== undefined) io.stderr(`queuebox: ./${beside} is not read: this command reads --config or QUEUEBOX_CONFIG only, so the defaults and QUEUEBOX_* variables apply. Add --config ${beside} to use it.\n`);
    }
    return path;
  };
  const config = (): QueueBoxConfig => {
    const path = configFile();
    return loadConfig({ env: io.env, ...(path !== undefined ? { path } : {}) });
  };
  async function withDriver<T>(verify: boolean, fn: (driver: Driver, cfg: QueueBoxConfig) => Promise<T>): Promise<T> {
    const cfg = config();
    const driver = await createDriver(cfg, io.env);
    try {
      if (verify) await driver.schemaVerify();
      return await fn(driver, cfg);
    } finally {
      await driver.close();
    }
  }

  program
    .command('migrate')
    .description('apply pending database migrations and the claim functions of this configuration (idempotent)')
    .option('--sql', 'print the DDL migrate applies for this configuration (database.type, database.schema, tables, outbox.batchSize) and apply nothing; needs no database: for your own migration tool or psql')
    .option('--check', 'change nothing; exit 1 naming each difference (migration not applied, missing column, claim function missing or not QueueBox\'s own, schema open to other roles), 0 when up to date')
    .addHelpText(
      'after',
      `
--sql prints an idempotent script: the migrate lock, the schema, each numbered migration not yet
recorded in queuebox_migrations (and its row), and on PostgreSQL the claim functions of
outbox.batchSize. Run it in one transaction, for example:
  queuebox migrate --sql > queuebox.sql && psql -v ON_ERROR_STOP=1 --single-transaction -f queuebox.sql "$DATABASE_URL"
A later \`queuebox migrate --check\` agrees with it. It drops nothing: claim functions of another
batch size stay until \`queuebox migrate\` runs (they are never called).

--check is for a deploy pipeline: run it after migrating and before deploying new code. A change
of outbox.batchSize needs new claim functions; until they exist, claims send their statement
(correct, planned at each claim) and --check names the missing functions.
See docs/upgrading.md.`,
    )
    .action((opts: { sql?: boolean; check?: boolean }) => {
      if (opts.sql && opts.check) throw new UsageError('--sql and --check exclude each other');
      if (opts.sql) {
        io.stdout(migrationScript(config(), [`Generated by queuebox ${packageVersion()} (queuebox migrate --sql). Idempotent; run it in one transaction.`]));
        return Promise.resolve();
      }
      if (opts.check) {
        return withDriver(false, async (driver) => {
          const problems = await driver.migrateCheck();
          // Migrations and claim functions are what `migrate` applies; an object changed by hand after
          // its migration (a dropped index, a default) is not re-created by it: its line gives the SQL.
          if (problems.length > 0) {
            throw new QueueBoxError(
              `the database does not match this release and configuration: run \`queuebox migrate\` for migrations and claim functions not applied; a line that gives SQL names an object changed by hand after its migration, which \`queuebox migrate\` does not restore: run that SQL; a line that names a table in the way says which key to change instead\n${problems.map((p) => `- ${p}`).join('\n')}`,
            );
          }
          io.stdout('schema is up to date\n');
        });
      }
      return withDriver(false, async (driver) => {
        io.stderr('applying migrations...\n');
        const { applied, claimFunctions } = await driver.migrate();
        io.stdout(applied.length ? `applied migrations ${applied.join(', ')}\n` : 'schema is up to date\n');
        if (claimFunctions !== undefined) io.stdout(describeClaimFunctions(claimFunctions));
      });
    });

  program
    .command('status')
    .description('rows per state per table, oldest pending age, latest dead rows with their errors, last finished pass of the poller, relay and reclaim')
    .option('--json', 'print JSON instead of a table')
    .option('--dead-limit <n>', 'dead rows to list per table', positive, 10)
    .action((opts: { json?: boolean; deadLimit: number }) =>
      withDriver(true, async (driver, cfg) => {
        const report = await collectStatus(driver, cfg, { deadLimit: opts.deadLimit });
        io.stdout(opts.json ? `${JSON.stringify(report, null, 2)}\n` : formatStatus(report));
      }),
    );

  program
    .command('reclaim')
    .description('return expired processing rows (outbox and inbox) to pending now, ignoring the throttle')
    .option('--json', 'print JSON')
    .action((opts: { json?: boolean }) =>
      withDriver(true, async (driver, cfg) => {
        const counts = await reclaimNow({ driver, config: cfg, throttled: false });
        io.stdout(opts.json ? `${JSON.stringify(counts)}\n` : `reclaimed: outbox ${counts.outbox}, inbox ${counts.inbox}${counts.outboxDead + counts.inboxDead > 0 ? `; dead after their last attempt: outbox ${counts.outboxDead}, inbox ${counts.inboxDead}` : ''}\n`);
      }),
    );

  program
    .command('replay')
    .description(`move dead (or sent) outbox rows, or dead inbox rows (--table inbox), back to pending (at least one filter; more than ${REPLAY_CONFIRM_ABOVE} rows need --yes)`)
    .addOption(new Option('--table <table>', 'rows of this table: outbox or inbox (relay and pull rows)').choices(['outbox', 'inbox']).default('outbox'))
    .option('--id <ids>', 'row id (repeatable, or comma-separated)', collect)
    .option('--topic <topic>', 'outbox: exact topic, taken whole (a comma is part of it); repeat the flag for more topics', repeat)
    .option('--destination <name>', 'outbox: rows whose topic a route sends to this destination')
    .option('--source <source>', 'inbox: exact source name, taken whole; repeat the flag for more sources', repeat)
    .addOption(new Option('--consumption <kind>', 'inbox: only push (relay) or pull rows; narrows another filter').choices(['push', 'pull']))
    .option('--created-from <time>', 'created (inbox: received) at or after (ISO-8601 with Z or an offset; a date alone is 00:00 UTC)')
    .option('--created-to <time>', 'created (inbox: received) before (ISO-8601 with Z or an offset; a date alone is 00:00 UTC)')
    .option('--last-error <prefix>', 'rows whose last error starts with this text (exact, case included)')
    .addOption(new Option('--state <states>', 'outbox states to move: dead, sent (default dead); the inbox moves dead rows only').argParser(collect))
    .option('--dry-run', 'print how many rows would move and a sample of them; move nothing')
    .option('--sample <n>', 'rows to show with --dry-run', positive, REPLAY_SAMPLE_SIZE)
    .option('--yes', `confirm a replay of more than ${REPLAY_CONFIRM_ABOVE} rows`)
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      `
Preview first, then move: a dry run counts the matching rows and lists the oldest; without --yes
a replay of more than ${REPLAY_CONFIRM_ABOVE} rows is refused, and the move itself moves nothing if
more than ${REPLAY_CONFIRM_ABOVE} match when it runs. A replay resets attempt, schedule, error and
claim and keeps each row's id and sequence.

--topic and --source take one exact name each (a topic may hold commas): repeat them for more,
--topic order.paid --topic order.refunded. --id and --state also take a comma-separated list.
Every other option takes one value, and is refused when given twice.

Outbox rows (the default):
  queuebox replay --destination orders --created-from 2026-11-30T00:00:00Z --dry-run
  queuebox replay --topic order.paid --last-error "HTTP 503" --yes

Dead inbox rows, relay (push) and pull alike (--table inbox):
  queuebox replay --table inbox --source stripe --dry-run
  queuebox replay --table inbox --source billing --consumption pull --id <row id>
A requeued inbox row is again the head of its aggregate: the aggregate's rows still pending wait
for it; rows of the aggregate already processed stay processed (they are not redone).
See docs/operations.md.`,
    )
    .action((opts: { table: 'outbox' | 'inbox'; id?: string[]; topic?: string[]; destination?: string; source?: string[]; consumption?: string; createdFrom?: string; createdTo?: string; lastError?: string; state?: string[]; dryRun?: boolean; sample: number; yes?: boolean; json?: boolean }, command: Command) =>
{
      // `--sample` only shapes a dry run's output: given without `--dry-run` it would be ignored
      // and the rows would move, which is not what asking to see rows means.
      if (!opts.dryRun && command.getOptionValueSource('sample') === 'cli') {
        throw new UsageError('replay: --sample is the number of rows a --dry-run shows; add --dry-run to see them (nothing moves), or leave --sample out to replay');
      }
      const request = parseReplayRequest({
        ...(opts.table === 'inbox' ? { table: 'inbox' } : {}),
        ...(opts.id ? { ids: opts.id } : {}),
        ...(opts.topic ? { topics: opts.topic } : {}),
        ...(opts.destination !== undefined ? { destination: opts.destination } : {}),
        ...(opts.source ? { sources: opts.source } : {}),
        ...(opts.consumption !== undefined ? { consumption: opts.consumption } : {}),
        ...(opts.createdFrom !== undefined ? { createdFrom: opts.createdFrom } : {}),
        ...(opts.createdTo !== undefined ? { createdTo: opts.createdTo } : {}),
        ...(opts.lastError !== undefined ? { lastErrorPrefix: opts.lastError } : {}),
        ...(opts.state ? { states: opts.state } : {}),
      }, REPLAY_FLAGS);
      const table = request.table ?? 'outbox';
      return withDriver(true, async (driver, cfg) => {
        try {
          if (opts.dryRun) {
            const preview = await previewReplay(driver, cfg, request, { sampleSize: opts.sample });
            io.stdout(opts.json ? `${JSON.stringify({ dryRun: true, table, ...preview })}\n` : formatReplayPreview(preview, request.states ?? ['dead'], table));
            return;
          }
          io.stderr(table === 'inbox' ? 'requeueing dead inbox rows...\n' : 'replaying...\n');
          const result = await runReplayCommand(driver, cfg, { request, dryRun: false, yes: opts.yes === true });
          const moved = 'moved' in result ? result.moved : 0;
          io.stdout(opts.json ? `${JSON.stringify(result)}\n` : table === 'inbox' ? `requeued ${moved} inbox rows\n` : `replayed ${moved} rows\n`);
        } catch (error) {
          throw explainStatementTimeout(error, cfg);
        }
      });
    });

  program
    .command('cleanup')
    .description('delete finished rows older than the retention ages, in batches')
    .option('--force', 'run even when retention.enabled is false')
    .option('--json', 'print JSON')
    .action((opts: { force?: boolean; json?: boolean }) =>
      withDriver(true, async (driver, cfg) => {
        if (!cfg.retention.enabled && !opts.force) {
          throw new UsageError('retention is disabled (retention.enabled: false); pass --force to delete by the configured ages anyway');
        }
        const progress = retentionProgress(io.stderr, { updating: io.stderrIsTTY === true, batchSize: cfg.retention.batchSize });
        const result = await runRetention({ driver, config: cfg, onBatch: progress.onBatch }).finally(progress.finish);
        io.stdout(opts.json ? `${JSON.stringify(result)}\n` : `deleted: outbox ${result.deleted.outbox}, inbox ${result.deleted.inbox}\n`);
      }),
    );

  program
    .command('console')
    .description('serve the operator console in a browser on 127.0.0.1 (read-only unless --allow-actions)')
    .option('--port <n>', 'TCP port (default 8787)', positive)
    .option('--host <address>', 'listen on this address instead of 127.0.0.1 (anything but loopback needs --require-token)')
    .option('--require-token', 'print an access address with a random token and serve only browsers that opened it')
    .option('--allow-actions', 'allow replay from the browser')
    .action(async (opts: { port?: number; host?: string; allowActions?: boolean; requireToken?: boolean }) => {
      const path = configFile();
      const { runConsole } = await import('../lib/console/run-console.ts');
      await runConsole({ ...opts, ...(path !== undefined ? { configPath: path } : {}), env: { ...io.env }, stdout: io.stdout, stderr: io.stderr });
    });

  const inbox = program.command('inbox').description('inbox messages from the command line');
  inbox
    .command('put')
    .description('put one message into an inbox source (e.g. a pull source, for your worker) through the receiver a deployed source uses: same checks, same idempotency')
    .requiredOption('--source <name>', 'the inbox source (inbox.sources.<name>)')
    .option('--body <json>', 'the message body (a JSON object)')
    .option('--body-file <path>', 'read the body from this file instead')
    .option('--key <key>', 'idempotency key (SQS: the x-idempotency-key attribute; HTTP: the source\'s key header, else X-Idempotency-Key); refused for an http source that keys on its signed body or sets idempotency; default: what the source takes otherwise')
    .option('--correlation-id <id>', 'correlation id (x-correlation-id)')
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      `
An sqs source gets the record its queue's Lambda trigger would pass; an http source gets the API
Gateway request, signed or authorised with the secret from the variable the source names. A put
with a key already stored is a duplicate (exit 0, nothing stored); a refused or dead message
exits 1 with the reason. --key is refused (exit 1, nothing stored) for an http source that takes
its key from the signed body (stripe, or a signed source with idempotencyKeyPath: put the key in
the body) or sets idempotency: none or body-digest.`,
    )
    .action((opts: { source: string; body?: string; bodyFile?: string; key?: string; correlationId?: string; json?: boolean }) => {
      if ((opts.body === undefined) === (opts.bodyFile === undefined)) throw new UsageError('give the message body with --body <json> or --body-file <path> (one of them)');
      const body = opts.body ?? readFileSync(opts.bodyFile!, 'utf8');
      return withDriver(true, async (driver, cfg) => {
        const { putInboxMessage } = await import('../lib/local/local-inbox-put.ts');
        const result = await putInboxMessage({
          config: cfg,
          driver,
          env: io.env,
          source: opts.source,
          body,
          ...(opts.key !== undefined ? { key: opts.key } : {}),
          ...(opts.correlationId !== undefined ? { correlationId: opts.correlationId } : {}),
        });
        io.stdout(opts.json ? `${JSON.stringify(result)}\n` : `${describePut(result)}\n`);
        if (result.outcome === 'refused') throw new QueueBoxError(`the ${opts.source} receiver refused the message (${result.status}): ${result.reason}`);
        if (result.outcome === 'stored dead') throw new QueueBoxError(`the ${opts.source} receiver stored the message dead: ${result.reason}`);
      });
    });

  program
    .command('local')
    .description('run the scheduled functions locally against the database (embedded PostgreSQL when none is configured)')
    .option('--demo', 'run the demo: SQS emulator, demo queues and bus, demo orders and webhooks (the default without a config file; refused with a config file that names destinations or routes)')
    .option('--no-demo', 'run only your functions, destinations and sources against your database (the default with --config or $QUEUEBOX_CONFIG)')
    .option('--messages <n>', 'enqueue this many demo messages first (demo only)', positive)
    .option('--exit-when-drained', 'stop when every row is finished: with the demo after --messages N, without it once the backlog is drained; exit 1 if any row became dead')
    .option('--use-existing', 'run even though the database already holds outbox or inbox rows (they will be published and relayed)')
    .option('--speed <factor>', 'divide schedule periods and timeouts by this factor, from 0.001 to 1000 (a demo in fast motion)', positiveNumber)
    .action(async (opts: { demo?: boolean; messages?: number; exitWhenDrained?: boolean; speed?: number; useExisting?: boolean }) => {
      const path = configFile();
      const run = io.runLocal ?? (await loadLocalRunner());
      const summary = (await run({ ...opts, ...(path !== undefined ? { configPath: path } : {}) })) as { stoppedBecause?: string; newlyDead?: number } | undefined;
      // A finite run is a check: rows that died during it fail it (each was printed with its error).
      const dead = summary?.newlyDead ?? 0;
      if (summary?.stoppedBecause === 'drained' && dead > 0) {
        throw new QueueBoxError(`the run drained with ${dead} row${dead === 1 ? '' : 's'} dead (printed above with ${dead === 1 ? 'its error' : 'their errors'}); \`queuebox status\` lists them`);
      }
    });

  pointErrorsAtHelp(program);
  refuseSecondValues(program);
  return program;
}

/** After a refusal by commander, one line naming the command's --help (not the whole help). */
function pointErrorsAtHelp(command: Command): void {
  command.showHelpAfterError(`(${commandPath(command)} --help lists ${command.commands.length > 0 ? 'the commands and options' : 'the options'})`);
  for (const sub of command.commands) pointErrorsAtHelp(sub);
}

/**
 * Refuses a second value of every option that takes one (`--destination a --destination b`, a
 * second `--created-from`, `--table inbox --table outbox`): commander would keep the last one
 * silently, and an operator who typed two meant both or mistyped one, never the last alone. A
 * default (`--table outbox`, `--sample 10`) is no value given: the first one typed replaces it.
 */
function refuseSecondValues(command: Command): void {
  for (const option of command.options) {
    if (!(option.required || option.optional) || option.variadic || REPEATABLE.has(option.parseArg)) continue;
    const parse = option.parseArg;
    const name = option.attributeName();
    option.argParser((value: string, previous: unknown) => {
      if (command.getOptionValueSource(name) === 'cli') throw new UsageError(`${option.long ?? option.flags} given twice; give it once`);
      return parse === undefined ? value : parse(value, previous);
    });
  }
  for (const sub of command.commands) refuseSecondValues(sub);
}

/** `queuebox inbox put`: the command as typed. */
function commandPath(command: Command): string {
  return command.parent ? `${commandPath(command.parent)} ${command.name()}` : command.name();
}

/**
 * A replay statement cancelled by PostgreSQL's statement_timeout (57014; `database.statementTimeoutMs`
 * bounds each statement of the CLI too): the filter matched more rows than one statement moves in
 * that time, or another transaction held them that long. The move is one statement, so nothing
 * moved; the way out is a narrower filter or a longer timeout. Anything else (a cancel by an
 * administrator included) is left as it is.
 */
function explainStatementTimeout(error: unknown, cfg: QueueBoxConfig): unknown {
  let timedOut = false;
  for (let current: unknown = error, depth = 0; current instanceof Error && depth < 5; current = current.cause, depth++) {
    if ((current as { code?: unknown }).code === '57014' && /statement timeout/i.test(current.message)) timedOut = true;
  }
  if (!timedOut) return error;
  return new QueueBoxError(
    `replay: the database cancelled the statement after database.statementTimeoutMs (${cfg.database.statementTimeoutMs} ms); nothing moved. ` +
      'Narrow the filter (--created-from/--created-to, --last-error, fewer topics, sources or ids) and replay in parts, ' +
      'or raise database.statementTimeoutMs for this command (QUEUEBOX_DATABASE__STATEMENT_TIMEOUT_MS=120000)',
    { cause: error },
  );
}

async function loadLocalRunner(): Promise<(options: Record<string, unknown>) => Promise<unknown>> {
  const { runLocal } = await import('../lib/local/local-runner.ts');
  return runLocal;
}

/** Runs the program on `argv`; returns the exit code (0 success, 1 failure) instead of exiting. */
export async function runCli(argv: readonly string[], io: CliIo = processIo()): Promise<number> {
  const program = createProgram(io);
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return 0;
  } catch (error) {
    if (isCommanderExit(error)) return error.exitCode;
    const debug = program.opts<{ debug?: boolean }>().debug === true || argv.includes('--debug');
    io.stderr(`queuebox: ${describeCliError(error, debug)}\n`);
    return 1;
  }
}

function isCommanderExit(error: unknown): error is { exitCode: number; code: string } {
  return typeof error === 'object' && error !== null && typeof (error as { code?: unknown }).code === 'string' && (error as { code: string }).code.startsWith('commander.');
}

/** One line for the outcome of `inbox put`. */
function describePut(result: InboxPutResult): string {
  if (result.outcome === 'refused') return `refused (${result.status}): ${result.reason}`;
  const row = `inbox row ${result.id} (source ${result.source}, ${result.consumption}, idempotency key ${result.idempotencyKey})`;
  if (result.outcome === 'duplicate') return `duplicate: already stored as ${row}; nothing stored`;
  if (result.outcome === 'stored dead') return `stored dead: ${row}: ${result.reason}`;
  return `stored ${row}`;
}

/** What `migrate` did to the PostgreSQL claim functions, one line each (none when nothing changed). */
function describeClaimFunctions(changes: NonNullable<MigrateResult['claimFunctions']>): string {
  const lines: string[] = [];
  if (changes.created.length > 0) lines.push(`created claim functions ${changes.created.join(', ')}`);
  if (changes.replaced.length > 0) lines.push(`replaced claim functions that were not QueueBox's definition: ${changes.replaced.join(', ')}`);
  if (changes.dropped.length > 0) lines.push(`dropped claim functions no longer used: ${changes.dropped.join(', ')}`);
  if (changes.notDropped.length > 0) lines.push(`claim functions no longer used, left in place (another role owns them): ${changes.notDropped.join(', ')}`);
  return lines.map((l) => `${l}\n`).join('');
}
