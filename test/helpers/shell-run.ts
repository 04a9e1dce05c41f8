/**
 * Runs a shell command the way a terminal does: in a process group of its own, so an interrupt
 * (SIGINT) reaches every process the command started, as Ctrl-C would; whatever is still running
 * when the time limit passes is killed with its group.
 */
import { spawn } from 'node:child_process';
import { dirname } from 'node:path';

/** The outcome of one command. */
export interface ShellResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** stdout and stderr interleaved, the last 6,000 characters. */
  output: string;
  /** True when the command was still running at `interruptAfterMs` and got SIGINT. */
  interrupted: boolean;
  /** True when it was still running at `timeoutMs` (its group was killed). */
  timedOut: boolean;
}

/** Options of `runShell`. */
export interface ShellOptions {
  cwd: string;
  env: NodeJS.ProcessEnv;
  timeoutMs: number;
  interruptAfterMs?: number;
  /** Count `interruptAfterMs` from when the output first contains this text (never, if it does not). */
  interruptAfterText?: string;
}

/** Proxy and certificate-authority variables, passed through as a terminal on this machine has them. */
const NETWORK_VARIABLES = /^(NODE_EXTRA_CA_CERTS|SSL_CERT_FILE|SSL_CERT_DIR|(HTTPS?|NO|ALL)_PROXY|(https?|no|all)_proxy)$/;

/**
 * The environment of a new terminal on this machine: the Node.js running the tests first on a
 * plain system PATH (nothing from `npm test`'s own environment: no npm_* variables, no
 * node_modules/.bin of the repository under test), HOME (npm's cache), a UTF-8 locale and the
 * machine's proxy and certificate settings. npm is told to prefer its cache and skip the audit
 * and funding requests.
 */
export function userEnvironment(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  // The machine's network settings are the user's too: a proxy and the certificate authorities
  // it needs (a registry reached through a TLS-inspecting proxy fails without them).
  const network = Object.fromEntries(Object.entries(process.env).filter(([name, value]) => value !== undefined && NETWORK_VARIABLES.test(name)));
  return {
    ...network,
    PATH: `${dirname(process.execPath)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
    HOME: process.env.HOME ?? '/root',
    LANG: 'C.UTF-8',
    TERM: 'dumb',
    npm_config_prefer_offline: 'true',
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_update_notifier: 'false',
    ...extra,
  };
}

/** Runs `bash -e -o pipefail -c command`; never rejects. */
export function runShell(command: string, options: ShellOptions): Promise<ShellResult> {
  return new Promise((resolve) => {
    const child = spawn('bash', ['-e', '-o', 'pipefail', '-c', command], {
      cwd: options.cwd,
      env: options.env,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    let interrupted = false;
    let timedOut = false;
    let interrupt: NodeJS.Timeout | undefined;
    const armInterrupt = () => {
      interrupt ??= setTimeout(() => {
        interrupted = true;
        signalGroup('SIGINT');
      }, options.interruptAfterMs);
    };
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-6000);
      if (options.interruptAfterMs !== undefined && options.interruptAfterText !== undefined && output.includes(options.interruptAfterText)) armInterrupt();
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const signalGroup = (signal: NodeJS.Signals) => {
      try {
        process.kill(-child.pid!, signal);
      } catch {
        // the group has already exited
      }
    };
    if (options.interruptAfterMs !== undefined && options.interruptAfterText === undefined) armInterrupt();
    const limit = setTimeout(() => {
      timedOut = true;
      signalGroup('SIGKILL');
    }, options.timeoutMs);
    // What the command left running in its group (a background job holding the output open) goes
    // when the command itself ends.
    child.on('exit', () => signalGroup('SIGKILL'));
    child.on('close', (code, signal) => {
      clearTimeout(interrupt);
      clearTimeout(limit);
      resolve({ code, signal, output, interrupted, timedOut });
    });
  });
}

/** A failure message: what ran, where, how it ended, and its last output. */
export function describeResult(command: string, result: ShellResult): string {
  const end = result.timedOut ? 'timed out' : result.signal ? `killed by ${result.signal}` : `exit ${result.code}`;
  return `$ ${command}\n(${end}${result.interrupted ? ', after SIGINT' : ''})\n${result.output}`;
}
