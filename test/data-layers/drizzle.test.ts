import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import pg from 'pg';
import postgres from 'postgres';
import { adapterCases } from './adapter-cases.ts';
import { drizzleHarness, nodePostgres } from './drizzle-harness.ts';

// Both drivers Drizzle offers for PostgreSQL, through the same adapter. On node-postgres the
// connection under a transaction that has ended reports it (postgres.js reports nothing).
adapterCases('drizzle (node-postgres)', drizzleHarness(nodePostgres(pg), { reportsEnded: true }));
adapterCases(
  'drizzle (postgres-js)',
  drizzleHarness(
    (url) => {
      const client = postgres(url, { max: 4, onnotice: () => {} });
      return { db: drizzlePostgresJs(client), close: () => client.end() };
    },
    { reportsEnded: false },
  ),
);
