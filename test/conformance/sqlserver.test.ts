/**
 * The driver conformance suite on SQL Server: runs when `QUEUEBOX_MSSQL_URL` is set (each run in a
 * fresh schema, dropped afterwards); otherwise every case is reported as skipped with the reason.
 */
import { runDriverConformance } from './driver-conformance.ts';
import { createSqlServerTarget } from './sqlserver-target.ts';

const url = process.env.QUEUEBOX_MSSQL_URL;

runDriverConformance('sqlserver', () => createSqlServerTarget(url!), url ? {} : { skip: 'QUEUEBOX_MSSQL_URL is not set: no SQL Server on this machine' });
