/**
 * The checker's own view of the outbox: a row trigger (installed in the test schema only) that
 * records every state change with the token it replaced and whether the replaced lease was still
 * live when the writing statement started (`statement_timestamp()`). The fence checks the lease at
 * some moment of the statement, never before it started, so a fenced write always passes; a write
 * sent after its lease ended does not. The trigger's own clock would not do: the fence may check
 * a row (in the scan of the table) well before the row is written, and on a loaded machine that
 * can be more than any tolerance — a late write that changes nothing another owner holds, since a
 * reclaim in between would have changed the row and the write would have re-checked its fence on
 * it. It is a BEFORE trigger: it fires as each row qualifies. The trigger adds work to each write,
 * never changes one.
 */
import type pg from 'pg';

/** One audited state change of an outbox row, in commit-independent insertion order. */
export interface AuditEntry {
  row_id: string;
  old_state: string;
  new_state: string;
  old_token: string | null;
  old_attempt: number;
  new_attempt: number;
  lease_live: boolean;
  /** The reclaim step's write: the claim cleared, `last_error` saying the lease expired (charged as a failed attempt, or not). */
  lease_lost: boolean;
}

/** Creates the audit table and the trigger on `schema`.outbox. */
export async function installAuditTrail(pool: pg.Pool, schema: string): Promise<void> {
  const s = `"${schema}"`;
  await pool.query(`
    CREATE TABLE ${s}.faults_audit (
      n bigserial PRIMARY KEY, row_id uuid NOT NULL, old_state text NOT NULL, new_state text NOT NULL,
      old_token uuid, old_attempt int NOT NULL, new_attempt int NOT NULL, lease_live boolean NOT NULL, lease_lost boolean NOT NULL);
    CREATE FUNCTION ${s}.faults_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF OLD.state IS DISTINCT FROM NEW.state THEN
        INSERT INTO ${s}.faults_audit (row_id, old_state, new_state, old_token, old_attempt, new_attempt, lease_live, lease_lost)
        VALUES (OLD.id, OLD.state, NEW.state, OLD.claim_token, OLD.attempt, NEW.attempt,
                COALESCE(OLD.lease_expires_at > statement_timestamp(), false),
                -- the reclaim step: its lease had ended (a fenced release, under a live lease, keeps
                -- the row's last_error, which may be an earlier reclaim's)
                NEW.claim_token IS NULL AND COALESCE(OLD.lease_expires_at <= clock_timestamp(), false)
                  AND COALESCE(NEW.last_error LIKE 'lease expired %' OR NEW.last_error LIKE '% the lease of the last one expired during %', false));
      END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER faults_audit BEFORE UPDATE ON ${s}.outbox FOR EACH ROW EXECUTE FUNCTION ${s}.faults_audit_fn();`);
}

/** Every audited change. */
export async function readAuditTrail(pool: pg.Pool, schema: string): Promise<AuditEntry[]> {
  const { rows } = await pool.query<AuditEntry>(
    `SELECT row_id, old_state, new_state, old_token, old_attempt, new_attempt, lease_live, lease_lost FROM "${schema}".faults_audit ORDER BY n`,
  );
  return rows;
}
