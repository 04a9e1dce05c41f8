/**
 * Guard of the local runner: a database that already holds QueueBox rows is not the local
 * runner's to drain. Its pending outbox rows would be published (to the emulator, or without the
 * demo to the configuration's destinations) and its inbox rows relayed or dead-lettered, so the
 * run refuses unless the operator says `--use-existing`.
 */
import type { Driver } from '../db/driver.ts';
import { UsageError } from '../errors.ts';

/**
 * Throws `UsageError` with the row counts when the outbox or the inbox has any row. `demo`: the
 * run publishes to the emulator (else to the configuration's own destinations).
 */
export async function refuseExistingRows(driver: Driver, where: string, demo = true): Promise<void> {
  const [outbox, inbox] = await Promise.all([driver.outboxStats(), driver.inboxStats()]);
  const total = (counts: Record<string, number>) => Object.values(counts).reduce((a, b) => a + b, 0);
  const outboxRows = total(outbox.counts);
  const inboxRows = total(inbox.counts);
  if (outboxRows + inboxRows === 0) return;
  throw new UsageError(
    `${where} already holds ${outboxRows} outbox and ${inboxRows} inbox rows that this local run did not create; ` +
      `it would publish them to ${demo ? 'the emulator' : 'your destinations'} and relay or dead-letter them. Point it at an empty database or schema, ` +
      'or pass --use-existing to run against these rows.',
  );
}
