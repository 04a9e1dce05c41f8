/**
 * The SQS emulator (fauxqs) for the `queuebox-sqs` case, run in the harness process so its
 * memory does not count against the poller's peak RSS in the case's child process.
 */
import { startFauxqs } from 'fauxqs';
import { freePort } from '../lib/local/embedded-database.ts';

export interface SqsEmulator {
  /** A new standard queue for one case. */
  newQueue(): Promise<{ endpoint: string; queueUrl: string }>;
  stop(): Promise<void>;
}

/** Starts fauxqs on a free loopback port. */
export async function startSqsEmulator(): Promise<SqsEmulator> {
  const port = await freePort();
  // fauxqs looks queues up by their exact URL, `http://sqs.<region>.<host>:<port>/…`; with host
  // `localhost` that URL is valid for WHATWG URL parsing (and so for the config schema).
  const server = await startFauxqs({ port, host: 'localhost', logger: false });
  const endpoint = `http://localhost:${server.port}`;
  let n = 0;
  return {
    async newQueue() {
      n++;
      const { queueUrl } = server.createQueue(`bench-${n}`);
      return { endpoint, queueUrl };
    },
    stop: () => server.stop(),
  };
}
