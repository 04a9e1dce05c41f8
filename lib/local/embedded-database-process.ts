/**
 * The supervisor of one embedded PostgreSQL cluster, started by `startEmbeddedDatabase` with an
 * IPC channel in a process group of its own. It sends `{ url }` once the database is ready (or
 * `{ error }`) and server output as `{ log }`; on the message `stop`, or when the channel closes
 * (its parent exited), it stops the server, removes the cluster's directory and exits.
 */
import { startEmbeddedCluster, type EmbeddedDatabaseMessage } from './embedded-database.ts';

const send = (message: EmbeddedDatabaseMessage) => {
  if (process.connected) process.send?.(message);
};

const started = startEmbeddedCluster((line) => send({ log: line }));
started.then(
  (database) => send({ url: database.url, adminUrl: database.adminUrl, marker: database.marker }),
  (error: unknown) => {
    send({ error: error instanceof Error ? error.message : String(error) });
    process.exitCode = 1;
    process.disconnect?.();
  },
);

let stopping: Promise<void> | undefined;
/** Stops the server (once started) and removes its directory, then exits. */
function stop(): Promise<void> {
  stopping ??= started
    .then((database) => database.stop())
    .catch(() => {})
    .then(() => process.exit(process.exitCode ?? 0));
  return stopping;
}
process.on('message', (message) => {
  if (message === 'stop') void stop();
});
process.on('disconnect', () => void stop());
