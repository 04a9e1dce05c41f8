/**
 * The statements of an embedded (`queuebox local`) cluster: the superuser creates QueueBox's own
 * role and database and marks the database with a random value, and `queuebox console` reads that
 * mark back to check that a local run file's URL leads to the database that run created.
 *
 * Role and password are not bindable in `CREATE ROLE`; both are quoted with `pg`'s escaping
 * (the role is a fixed name, the password random hex).
 */
import pg from 'pg';

/** As the superuser on `admin`: a login role that is not a superuser and may not create databases or roles, owning a new database of the same name, marked `marker`. */
export async function localClusterCreateOwner(admin: pg.Client, p: { role: string; password: string; database: string; marker: string }): Promise<void> {
  const role = admin.escapeIdentifier(p.role);
  const database = admin.escapeIdentifier(p.database);
  await admin.query(`CREATE ROLE ${role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD ${admin.escapeLiteral(p.password)}`);
  await admin.query(`CREATE DATABASE ${database} OWNER ${role}`);
  await admin.query(`COMMENT ON DATABASE ${database} IS ${admin.escapeLiteral(p.marker)}`);
}

/** The mark (database comment) of the database `url` leads to (null when it has none); connects once. */
export async function localClusterReadMark(url: string): Promise<string | null> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  await client.connect();
  try {
    const { rows } = await client.query<{ marker: string | null }>(
      `SELECT shobj_description(oid, 'pg_database') AS marker FROM pg_database WHERE datname = current_database()`,
    );
    return rows[0]?.marker ?? null;
  } finally {
    await client.end();
  }
}
