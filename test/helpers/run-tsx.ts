/**
 * Runs a TypeScript entry point of this repository in a child Node.js (`node --import tsx`, what
 * the npm scripts run without npx's start-up), collecting its output; killed after `timeoutMs`.
 */
import { spawn, type ChildProcess } from 'node:child_process';

export interface TsxRun {
  code: number | null;
  /** The signal that ended the child, if one did. */
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** `onOutput` sees the child and its standard output so far after each chunk (e.g. to signal it). */
export function runTsx(args: string[], env: NodeJS.ProcessEnv, timeoutMs = 120_000, onOutput?: (child: ChildProcess, stdout: string) => void): Promise<TsxRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      onOutput?.(child, stdout);
    });
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}
