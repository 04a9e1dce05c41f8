/**
 * `queuebox inbox put`: puts one message into an inbox source from a laptop — typically a pull
 * source, for the worker you are writing — through the same receiver a deployed source uses, so
 * the same checks, idempotency and storage apply:
 *
 * - an `sqs` source: the SQS receiver, given the record its queue's Lambda trigger would pass
 *   (`eventSourceARN` ending in the source's `queueName`, `x-idempotency-key` and
 *   `x-correlation-id` message attributes from `key` and `correlationId`, a fresh `MessageId`).
 *   As from SQS, a body that cannot be accepted is stored `dead` with the reason.
 * - an `http` source: the HTTP receiver, given the API Gateway event of `POST
 *   {inbox.basePath}{path}`, authenticated as a sender holding the source's secret (from the
 *   environment variable the source names) would: signed (hmac, stripe, github) or with its token
 *   or key. `key` goes in the source's key header (`idempotencyKeyHeader`, `X-GitHub-Delivery`
 *   for github), else in `X-Idempotency-Key`. A source that takes its key from the signed body,
 *   or sets `idempotency: none` or `body-digest`, would ignore it: `key` is refused there
 *   (`UsageError`) before anything is sent. A refused request stores nothing.
 */
import { createHmac, randomUUID } from 'node:crypto';
import type { AuthConfig, QueueBoxConfig, SourceConfig } from '../config/schema.ts';
import type { Driver, InboxInsertResult, InboxMessageInput } from '../db/driver.ts';
import { requireSecret } from '../config/load-config.ts';
import { UsageError } from '../errors.ts';
import { createHttpReceiver } from '../inbox/http-receiver.ts';
import { idempotencyChoice, type IdempotencyChoice } from '../inbox/idempotency-choice.ts';
import { hmacSignature } from '../inbox/source-auth.ts';
import { createSqsReceiver } from '../inbox/sqs-receiver.ts';
import { createLogger } from '../observability/logger.ts';
import { QueueBoxMetrics } from '../observability/metrics.ts';
import { EMULATOR_REGION } from './local-sqs-emulator.ts';
import { apiGatewayPostEvent } from './local-demo-webhooks.ts';

export interface InboxPutInput {
  config: QueueBoxConfig;
  driver: Driver;
  env: Readonly<Record<string, string | undefined>>;
  /** The inbox source's name. */
  source: string;
  /** The message body as sent (JSON text). */
  body: string;
  /** Idempotency key (SQS: the `x-idempotency-key` attribute; HTTP: the source's key header, else `X-Idempotency-Key`); refused for an http source that does not take it. */
  key?: string;
  correlationId?: string;
}

/** What the receiver did with the message. */
export type InboxPutResult =
  | { outcome: 'stored' | 'duplicate'; id: string; source: string; idempotencyKey: string; consumption: 'push' | 'pull' }
  | { outcome: 'stored dead'; id: string; source: string; idempotencyKey: string; consumption: 'push' | 'pull'; reason: string }
  | { outcome: 'refused'; status: number; reason: string };

/** Puts one message into `source` through its receiver; throws `UsageError` for a source the config does not declare, or a `key` the source would not take. */
export async function putInboxMessage(input: InboxPutInput): Promise<InboxPutResult> {
  const { config } = input;
  const source = config.inbox.sources[input.source];
  if (source === undefined) {
    const names = Object.entries(config.inbox.sources).map(([name, s]) => `${name} (${s.type}, ${s.consumption})`);
    throw new UsageError(`no inbox source "${input.source}" in the configuration; ${names.length > 0 ? `its sources are: ${names.join(', ')}` : 'it declares none (inbox.sources)'}`);
  }
  // An empty key (`--key "$EVENT_ID"` with the variable unset) would be no key: the receiver's own
  // choice, a new MessageId at each put, so each retry of the script stored the message again.
  if (input.key === '') throw new UsageError('--key is empty: give the idempotency key, or leave --key out for the key the source takes otherwise');
  // The receivers are the deployed ones; only their store is watched, to report what it stored.
  const stored: Array<{ message: InboxMessageInput; result: InboxInsertResult }> = [];
  const driver: Driver = Object.create(input.driver, {
    inboxInsert: {
      value: async (message: InboxMessageInput) => {
        const result = await input.driver.inboxInsert(message);
        stored.push({ message, result });
        return result;
      },
    },
  }) as Driver;
  const logger = createLogger({ serviceName: config.observability.serviceName, logLevel: config.observability.logLevel });
  const metrics = new QueueBoxMetrics({ namespace: config.observability.namespace, serviceName: config.observability.serviceName, write: () => {} });
  if (source.type === 'sqs') {
    const receive = createSqsReceiver({ config, driver, logger });
    const queue = source.queueName ?? input.source;
    const messageId = randomUUID();
    const attributes: Record<string, { stringValue: string; dataType: string; stringListValues: []; binaryListValues: [] }> = {};
    const attribute = (value: string) => ({ stringValue: value, dataType: 'String', stringListValues: [] as [], binaryListValues: [] as [] });
    if (input.key !== undefined) attributes['x-idempotency-key'] = attribute(input.key);
    if (input.correlationId !== undefined) attributes['x-correlation-id'] = attribute(input.correlationId);
    const response = await receive(
      {
        Records: [
          {
            messageId,
            receiptHandle: `local-${messageId}`,
            body: input.body,
            attributes: { ApproximateReceiveCount: '1', SentTimestamp: String(Date.now()), SenderId: 'local', ApproximateFirstReceiveTimestamp: String(Date.now()) },
            messageAttributes: attributes,
            md5OfBody: '',
            eventSource: 'aws:sqs',
            eventSourceARN: `arn:aws:sqs:${EMULATOR_REGION}:000000000000:${queue}`,
            awsRegion: EMULATOR_REGION,
          },
        ],
      },
      metrics,
    );
    const put = stored[0];
    if (response.batchItemFailures.length > 0 || put === undefined) throw new Error(`the message could not be stored in source ${input.source} (the receiver's log line says why)`);
    return resultOf(input.source, put);
  }
  const choice = idempotencyChoice(input.source, source);
  if (input.key !== undefined) {
    const elsewhere = keyNotTaken(choice);
    if (elsewhere !== undefined) throw new UsageError(`--key cannot be used with source ${input.source}: ${elsewhere}; leave --key out`);
  }
  const path = `${config.inbox.basePath}${source.path ?? ''}`;
  const receive = createHttpReceiver({ config, driver, logger, env: input.env });
  const headers: Record<string, string> = { 'content-type': 'application/json', host: 'localhost', 'user-agent': 'queuebox-inbox-put' };
  if (input.key !== undefined) headers[choice.kind === 'header' ? choice.header.toLowerCase() : 'x-idempotency-key'] = input.key;
  if (input.correlationId !== undefined) headers['x-correlation-id'] = input.correlationId;
  Object.assign(headers, authHeaders(input.source, source, input.body, input.env));
  const answer = await receive(apiGatewayPostEvent(path, input.body, headers), metrics);
  const status = answer.statusCode ?? 0;
  const put = stored[0];
  if ((status === 202 || status === 200) && put !== undefined) return resultOf(input.source, put);
  const reason = (JSON.parse(String(answer.body ?? '{}')) as { error?: string }).error ?? `HTTP ${status}`;
  return { outcome: 'refused', status, reason };
}

/**
 * Why an http source would not take a key given with `--key`, or undefined when it does (from
 * its key header, or from `X-Idempotency-Key` before the body on an unsigned source).
 */
function keyNotTaken(choice: IdempotencyChoice): string | undefined {
  switch (choice.kind) {
    case 'header':
      return undefined;
    case 'path':
      return choice.header === undefined ? `it takes the idempotency key from the signed body, at ${choice.path}: put the key there` : undefined;
    case 'none':
      return 'it stores every delivery under a new key (idempotency: none)';
    case 'body-digest':
      return 'its idempotency key is the SHA-256 of the body (idempotency: body-digest)';
  }
}

function resultOf(source: string, put: { message: InboxMessageInput; result: InboxInsertResult }): InboxPutResult {
  const common = { id: put.result.id, source, idempotencyKey: put.message.idempotencyKey, consumption: put.message.consumption ?? 'push' };
  if (put.result.duplicate) return { outcome: 'duplicate', ...common };
  if (put.message.deadReason !== undefined) return { outcome: 'stored dead', ...common, reason: put.message.deadReason };
  return { outcome: 'stored', ...common };
}

/** The headers a sender holding the source's secret sends (read from the variable the source names). */
function authHeaders(name: string, source: SourceConfig, body: string, env: Readonly<Record<string, string | undefined>>): Record<string, string> {
  const auth: AuthConfig | undefined = source.auth;
  const key = `inbox.sources.${name}.auth`;
  const timestamp = String(Math.floor(Date.now() / 1000));
  switch (auth?.type) {
    case undefined:
    case 'none':
      return {};
    case 'bearer':
      return { authorization: `Bearer ${requireSecret(env, auth.tokenEnv, `${key}.tokenEnv`)}` };
    case 'api-key':
      return { [auth.header.toLowerCase()]: requireSecret(env, auth.keyEnv, `${key}.keyEnv`) };
    case 'hmac': {
      const secret = requireSecret(env, auth.secretEnv, `${key}.secretEnv`);
      return {
        [auth.timestampHeader.toLowerCase()]: timestamp,
        [auth.signatureHeader.toLowerCase()]: `${auth.algorithm}=${hmacSignature(auth.algorithm, secret, timestamp, Buffer.from(body))}`,
      };
    }
    case 'stripe': {
      const secret = requireSecret(env, auth.secretEnv, `${key}.secretEnv`);
      return { 'stripe-signature': `t=${timestamp},v1=${hmacSignature('sha256', secret, timestamp, Buffer.from(body))}` };
    }
    case 'github': {
      const secret = requireSecret(env, auth.secretEnv, `${key}.secretEnv`);
      return { 'x-hub-signature-256': `sha256=${createHmac('sha256', secret).update(body).digest('hex')}` };
    }
  }
}
