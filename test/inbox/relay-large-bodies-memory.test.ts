/**
 * The relay's memory follows its bodies' stored text, not their parse. A body of 1,048,575 bytes
 * shaped `{"type":"t","a":[{},{},…]}` is within the default `inbox.maxBodyBytes` (answered 202),
 * and about 18 MB of heap once parsed: a relay that parsed every claimed payload up front ran out
 * of heap on 30 of them with a heap well below a 512 MB Lambda's, left the batch `processing`,
 * crashed again on the same batch at the next invocation, and the rows of every other source
 * claimed with them went `dead` without ever being forwarded.
 *
 * Here the deployed relay handler runs in a process of its own with `--max-old-space-size=300`
 * (`relay-handler-child.ts`), after the real HTTP receiver stored 30 such bodies of one source
 * between small messages of another: every row of both reaches the outbox, in receive order, its
 * payload as stored, none `dead`. And a claim brings a bounded amount of payload text into memory
 * (`relay-claim-size.ts`), one row at least, however large.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { handler as httpHandler } from '../../functions/inbox-http.ts';
import type { ConfigInput } from '../../lib/config/schema.ts';
import type { Driver, InboxRow } from '../../lib/db/driver.ts';
import { relayClaimed, relayClaimLimit } from '../../lib/inbox/relay-claim-size.ts';
import { forwardItemOf, relayMessage, runRelayPass } from '../../lib/inbox/relay-pass.ts';
import { createLogger } from '../../lib/observability/logger.ts';
import { QueueBoxMetrics } from '../../lib/observability/metrics.ts';
import { CLAIM_PAYLOAD_BUDGET_CHARS } from '../../lib/outbox/claim-size.ts';
import { createPullClient } from '../../lib/pull/pull-client.ts';
import { setContainer } from '../../lib/runtime/container.ts';
import { createDeadline } from '../../lib/runtime/deadline.ts';
import { apiGatewayV2Event } from '../helpers/api-gateway-event.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { fakeLambdaContext } from '../helpers/lambda-context.ts';
import { runTsx } from '../helpers/run-tsx.ts';

const MiB = 1024 * 1024;
/** The hostile body: as many `{}` as fit in 1,048,575 bytes (under the default limit of 1 MiB). */
function hostileBody(): string {
  const head = '{"type":"t","a":[';
  return `${head}${Array.from({ length: Math.floor((MiB - head.length - 2) / 3) }, () => '{}').join(',')}]}`;
}

const CONFIG: ConfigInput = {
  inbox: {
    // The defaults that matter here: relay.batchSize 100, maxBodyBytes 1 MiB.
    sources: {
      open: { type: 'http', path: '/open', auth: { type: 'none' }, eventTypePath: '$.type' },
      partner: { type: 'http', path: '/partner', auth: { type: 'none' }, eventTypePath: '$.type', aggregateIdPath: '$.agg' },
      pulled: { type: 'http', path: '/pulled', auth: { type: 'none' }, consumption: 'pull' },
    },
  },
};

describe('relay memory with large bodies', { timeout: 300_000 }, () => {
  let db: TestDatabase;
  let inbox: string;
  let outbox: string;
  before(async () => {
    db = await createTestDatabase(CONFIG);
    inbox = `"${db.schema}".inbox`;
    outbox = `"${db.schema}".outbox`;
  });
  beforeEach(async () => {
    await db.query(`TRUNCATE ${inbox}, ${outbox}, "${db.schema}".queuebox_maintenance`);
  });
  after(async () => {
    await db?.drop();
  });

  it('30 bodies of 1,048,575 bytes answered 202 are relayed under a 300 MB heap, with every row of another source, in order and none dead', async () => {
    const body = hostileBody();
    assert.equal(Buffer.byteLength(body), MiB - 1);
    setContainer({ config: db.config, driver: db.driver, logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }), env: {}, writeMetrics: () => {} });
    try {
      for (let i = 0; i < 30; i++) {
        const big = await httpHandler(apiGatewayV2Event('/inbox/open', body, { 'x-idempotency-key': `big-${i}` }), fakeLambdaContext({ timeoutMs: 30_000 }));
        assert.equal(big.statusCode, 202, big.body);
        const small = await httpHandler(apiGatewayV2Event('/inbox/partner', JSON.stringify({ type: 'paid', agg: `c${i % 7}`, n: i }), { 'x-idempotency-key': `small-${i}` }), fakeLambdaContext({ timeoutMs: 30_000 }));
        assert.equal(small.statusCode, 202, small.body);
      }
    } finally {
      setContainer(undefined);
    }

    const child = fileURLToPath(new URL('./relay-handler-child.ts', import.meta.url));
    const run = await runTsx(['--max-old-space-size=300', child], {
      ...process.env,
      DATABASE_URL: db.url,
      RELAY_SCHEMA: db.schema,
      RELAY_CONFIG: JSON.stringify(CONFIG),
      RELAY_INVOCATION_MS: '10000',
      // It stops as soon as no row is left; the slack is for a loaded machine, where a slow pass leaves rows to their lease.
      RELAY_MAX_INVOCATIONS: '20',
    }, 240_000);
    const heapOut = /heap out of memory/i.test(run.stderr);
    assert.equal(run.code, 0, `the relay process ended with ${run.code ?? run.signal}${heapOut ? ' (JavaScript heap out of memory)' : ''}: ${run.stderr.slice(-600)}`);
    const summaries = run.stdout.trim().split('\n').map((line) => JSON.parse(line) as { claimed: number; dead: number; abandoned: number });
    assert.equal(summaries.reduce((n, s) => n + s.dead, 0), 0, run.stdout);

    const states = await db.query<{ source: string; state: string; n: number }>(`SELECT source, state, count(*)::int AS n FROM ${inbox} GROUP BY source, state ORDER BY source, state`);
    assert.deepEqual(states, [
      { source: 'open', state: 'processed', n: 30 },
      { source: 'partner', state: 'processed', n: 30 },
    ]);
    // Each inbox row once in the outbox, its payload as stored, and each source's rows in receive order.
    const relayed = await db.query<{ source: string; inbox_sequence: string; same_payload: boolean }>(
      `SELECT i.source, i.sequence::text AS inbox_sequence, o.payload::text = i.payload::text AS same_payload
         FROM ${outbox} o JOIN ${inbox} i ON i.id::text = o.headers ->> 'x-inbox-id'
        ORDER BY o.sequence`,
    );
    assert.equal(relayed.length, 60);
    assert.ok(relayed.every((r) => r.same_payload), 'every outbox payload is the stored inbox payload');
    for (const source of ['open', 'partner']) {
      const order = relayed.filter((r) => r.source === source).map((r) => BigInt(r.inbox_sequence));
      assert.equal(order.length, 30);
      assert.ok(order.every((s, i) => i === 0 || s > order[i - 1]!), `${source}'s rows reach the outbox in receive order`);
    }
  });

  /** A pass in drain mode on a driver of its own (a new container's), recording each claim's rows and payload text. */
  async function drainRecordingClaims(driver: Driver, config = db.config): Promise<{ claims: Array<{ limit: number; rows: number; payloadChars: number }>; forwarded: number; dead: number }> {
    const claims: Array<{ limit: number; rows: number; payloadChars: number }> = [];
    const recording: Driver = Object.create(driver, {
      inboxClaimPushMany: {
        value: async (p: { limit: number; leaseMs: number }): Promise<InboxRow[]> => {
          const rows = await driver.inboxClaimPushMany(p);
          claims.push({ limit: p.limit, rows: rows.length, payloadChars: rows.reduce((n, r) => n + r.payloadText.length, 0) });
          return rows;
        },
      },
    }) as Driver;
    const summary = await runRelayPass({
      config,
      driver: recording,
      logger: createLogger({ serviceName: 'test', logLevel: 'SILENT' }),
      metrics: new QueueBoxMetrics({ namespace: 'QueueBox', serviceName: 'test', write: () => {} }),
      deadline: createDeadline(fakeLambdaContext({ timeoutMs: 120_000 }), 0),
      mode: 'drain',
    });
    return { claims: claims.filter((c) => c.rows > 0), forwarded: summary.forwarded, dead: summary.dead };
  }

  it('a claim holds at most about 32 MiB of payload text: 100 bodies of nearly 1 MiB take several claims, small rows one', async () => {
    // Strings of 1,000,000 characters: within the receivers' limit, as every stored body is.
    await db.query(
      `INSERT INTO ${inbox} (source, idempotency_key, event_type, payload)
       SELECT 'open', 'big-' || g, 't', jsonb_build_object('type', 't', 's', repeat('x', 1000000)) FROM generate_series(1, 100) g`,
    );
    const driver = db.newDriver();
    const large = await drainRecordingClaims(driver);
    assert.deepEqual([large.forwarded, large.dead], [100, 0]);
    assert.ok(large.claims.length >= 4, JSON.stringify(large.claims));
    for (const claim of large.claims) {
      assert.ok(claim.rows < 100 && claim.payloadChars <= CLAIM_PAYLOAD_BUDGET_CHARS, `claim of ${claim.rows} rows, ${claim.payloadChars} characters of payload: ${JSON.stringify(large.claims)}`);
    }
    // Small rows bring the claim back to batchSize.
    await db.query(`INSERT INTO ${inbox} (source, idempotency_key, event_type, payload) SELECT 'open', 'small-' || g, 't', jsonb_build_object('n', g) FROM generate_series(1, 250) g`);
    const small = await drainRecordingClaims(driver);
    assert.equal(small.forwarded, 250);
    assert.ok(small.claims.some((c) => c.limit === 100 && c.rows === 100), JSON.stringify(small.claims));
  });

  it('a row larger than the whole budget still moves: a claim takes at least one row', async () => {
    const config = { ...db.config, inbox: { ...db.config.inbox, maxBodyBytes: 64 * MiB } };
    await db.query(
      `INSERT INTO ${inbox} (source, idempotency_key, event_type, payload)
       SELECT 'open', 'huge-' || g, 't', jsonb_build_object('type', 't', 's', repeat('y', $1::int)) FROM generate_series(1, 2) g`,
      [CLAIM_PAYLOAD_BUDGET_CHARS + 1000],
    );
    const result = await drainRecordingClaims(db.newDriver(), config);
    assert.deepEqual([result.forwarded, result.dead], [2, 0]);
    assert.deepEqual(result.claims.map((c) => [c.limit, c.rows]), [[1, 1], [1, 1]]);
    const [same] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${outbox} o JOIN ${inbox} i ON i.id::text = o.headers ->> 'x-inbox-id' WHERE o.payload = i.payload`);
    assert.equal(same!.n, 2);
  });

  /** Whether `target.payload` is still the unread accessor of `withLazyPayload` (not parsed yet). */
  const unparsed = (target: object) => typeof Object.getOwnPropertyDescriptor(target, 'payload')?.get === 'function';

  it('claimed rows and the messages the relay makes of them keep their payload unparsed through both forwards; a pull message parses its payload when read', async () => {
    await db.query(
      `INSERT INTO ${inbox} (source, idempotency_key, event_type, payload, consumption)
       SELECT 'open', 'k-' || g, 't', jsonb_build_object('type', 't', 'n', g, 'big', 123456789012345678901234567890), 'push' FROM generate_series(1, 3) g
       UNION ALL SELECT 'pulled', 'p-1', 't', '{"n": 1, "list": [1, 2]}', 'pull'`,
    );
    const rows = await db.driver.inboxClaimPushMany({ limit: 10, leaseMs: 30_000 });
    assert.equal(rows.length, 3);
    assert.ok(rows.every(unparsed), 'a claim parses no payload');
    const messages = rows.map((row) => {
      const built = relayMessage(row, db.config.inbox.topicTemplate);
      assert.ok('message' in built);
      return built.message;
    });
    assert.ok(messages.every(unparsed) && rows.every(unparsed), 'building the outbox message parses no payload');
    const [first, ...rest] = rows;
    // Row by row (the fallback, and SQL Server's way), then batched.
    assert.equal(await db.driver.inboxForward(forwardItemOf(first!, messages[0]!, 'source-and-aggregate'), { maxAttempts: 5 }), true);
    assert.equal((await db.driver.inboxForwardMany!(rest.map((row, i) => forwardItemOf(row, messages[i + 1]!, 'source-and-aggregate')), { maxAttempts: 5 })).length, 2);
    assert.ok(messages.every(unparsed) && rows.every(unparsed), 'forwarding parses no payload');
    // Read, the payload is the stored JSON parsed; the outbox has the stored text, every digit.
    assert.deepEqual(messages[0]!.payload, { type: 't', n: 1, big: 1.2345678901234568e29 });
    const [same] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${outbox} o JOIN ${inbox} i ON i.id::text = o.headers ->> 'x-inbox-id' WHERE o.payload::text = i.payload::text AND o.payload::text LIKE '%123456789012345678901234567890%'`);
    assert.equal(same!.n, 3);

    const [message, ...none] = await createPullClient(db.driver).claim('pulled', { batch: 5, leaseMs: 30_000 });
    assert.equal(none.length, 0);
    assert.ok(unparsed(message!), 'a pull claim parses no payload');
    assert.deepEqual({ payload: message!.payload, claim: message!.claim }, { payload: { n: 1, list: [1, 2] }, claim: { id: message!.id, token: message!.claimToken } });
    assert.deepEqual(Object.keys(message!).sort(), ['aggregateId', 'attempt', 'claim', 'claimToken', 'correlationId', 'createdAt', 'eventType', 'headers', 'id', 'idempotencyKey', 'leaseExpiresAt', 'payload', 'payloadText', 'source', 'trace']);
  });

  it('the claim limit: lowered by large rows to no fewer than 1, back to batchSize after small ones; a new container counts a row as maxBodyBytes', () => {
    const driver = {};
    assert.equal(relayClaimLimit(driver, 100, MiB), 25, 'before any claim: 32 rows of 1 MiB, rounded down to a rung');
    assert.equal(relayClaimLimit(driver, 10, MiB), 10);
    relayClaimed(driver, Array.from({ length: 100 }, () => ({ payloadText: '{"n":1}' })));
    assert.equal(relayClaimLimit(driver, 100, MiB), 100);
    relayClaimed(driver, [{ payloadText: 'x'.repeat(40 * MiB) }]);
    assert.equal(relayClaimLimit(driver, 100, MiB), 1);
    relayClaimed(driver, []);
    assert.equal(relayClaimLimit(driver, 100, MiB), 1, 'a claim that found nothing teaches nothing');
  });
});
