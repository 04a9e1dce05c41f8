/**
 * One line describing the machine and the PostgreSQL server of the run.
 */
import { cpus, totalmem } from 'node:os';
import pg from 'pg';

/** `node`, CPU count, memory and `SELECT version()` of the server at `url`. */
export async function serverInfo(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ version: string }>('SELECT version() AS version');
    return `machine: ${cpus().length} cores, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}; server: ${rows[0]!.version}`;
  } finally {
    await client.end();
  }
}
