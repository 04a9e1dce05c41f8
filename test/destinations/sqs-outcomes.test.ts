/**
 * SQS answers that fauxqs cannot produce (partial failures, throttling, 5xx), replayed with
 * aws-sdk-client-mock on a real SQSClient, and the per-entry outcome each one maps to.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  BatchRequestTooLong,
  KmsThrottled,
  QueueDoesNotExist,
  RequestThrottled,
  SendMessageBatchCommand,
  SQSClient,
  SQSServiceException,
} from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import type { EntryOutcome } from '../../lib/destinations/destination.ts';
import { SqsDestination } from '../../lib/destinations/sqs-destination.ts';
import { outboundMessage } from '../helpers/outbound-message.ts';

const queueUrl = 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders';

function mockedDestination() {
  const client = new SQSClient({ region: 'eu-west-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
  const mock = mockClient(client);
  return { mock, destination: new SqsDestination({ name: 'orders', queueUrl, client }) };
}

function serviceError(name: string, httpStatusCode: number, extra: { $retryable?: { throttling?: boolean } } = {}): SQSServiceException {
  return Object.assign(
    new SQSServiceException({ name, $fault: httpStatusCode >= 500 ? 'server' : 'client', $metadata: { httpStatusCode }, message: `${name} happened` }),
    extra,
  );
}

const statusAndDeadNow = (o: EntryOutcome) => [o.status, o.status === 'sent' ? undefined : o.deadNow];

describe('SQS outcome mapping', () => {
  it('maps each entry of a partial batch failure to its own row', async () => {
    const { mock, destination } = mockedDestination();
    mock.on(SendMessageBatchCommand).callsFake((input: { Entries: Array<{ Id: string }> }) => {
      const [a, b, c] = input.Entries;
      return {
        Successful: [{ Id: a!.Id, MessageId: 'm-1', MD5OfMessageBody: 'x' }],
        Failed: [
          { Id: b!.Id, SenderFault: false, Code: 'InternalError', Message: 'try again' },
          { Id: c!.Id, SenderFault: true, Code: 'InvalidParameterValue', Message: 'bad value' },
        ],
      };
    });
    const rows = [outboundMessage(), outboundMessage(), outboundMessage(), outboundMessage()];
    const outcomes = await destination.publishBatch(rows);
    assert.deepEqual(outcomes.map((o) => o.id), rows.map((r) => r.id));
    assert.deepEqual(outcomes[0], { id: rows[0]!.id, status: 'sent' });
    assert.deepEqual(outcomes[1], { id: rows[1]!.id, status: 'retryable', error: 'SQS SendMessageBatch entry failed: InternalError: try again', errorClass: 'InternalError' });
    assert.deepEqual(outcomes[2], { id: rows[2]!.id, status: 'permanent', error: 'SQS SendMessageBatch entry failed: InvalidParameterValue (sender fault): bad value', errorClass: 'InvalidParameterValue' });
    assert.deepEqual(outcomes[3], { id: rows[3]!.id, status: 'retryable', error: 'SQS SendMessageBatch returned no result for this entry', errorClass: 'NoResult' });
  });

  it('dead-letters at once only the InvalidParameterValue of a message over the queue\'s MaximumMessageSize', async () => {
    const { mock, destination } = mockedDestination();
    mock.on(SendMessageBatchCommand).callsFake((input: { Entries: Array<{ Id: string }> }) => {
      const [a, b, c] = input.Entries;
      return {
        Successful: [],
        Failed: [
          { Id: a!.Id, SenderFault: true, Code: 'InvalidParameterValue', Message: 'One or more parameters are invalid. Reason: Message must be shorter than 262144 bytes.' },
          { Id: b!.Id, SenderFault: true, Code: 'InvalidParameterValue', Message: 'Value for parameter MessageGroupId is invalid.' },
          { Id: c!.Id, SenderFault: false, Code: 'InvalidParameterValue', Message: 'Message must be shorter than 262144 bytes.' },
        ],
      };
    });
    const rows = [outboundMessage(), outboundMessage(), outboundMessage()];
    const outcomes = await destination.publishBatch(rows);
    assert.deepEqual(outcomes.map(statusAndDeadNow), [['permanent', true], ['permanent', undefined], ['retryable', undefined]]);
    assert.equal(
      (outcomes[0] as { error: string }).error,
      'SQS SendMessageBatch entry failed: InvalidParameterValue (sender fault): One or more parameters are invalid. Reason: Message must be shorter than 262144 bytes.',
    );
  });

  it('uses batch-local entry ids and maps them back to row ids', async () => {
    const { mock, destination } = mockedDestination();
    const seen: string[][] = [];
    mock.on(SendMessageBatchCommand).callsFake((input: { Entries: Array<{ Id: string }> }) => {
      seen.push(input.Entries.map((e) => e.Id));
      return { Successful: [...input.Entries].reverse().map((e) => ({ Id: e.Id, MessageId: `m-${e.Id}`, MD5OfMessageBody: 'x' })), Failed: [] };
    });
    const rows = Array.from({ length: 12 }, () => outboundMessage());
    const outcomes = await destination.publishBatch(rows);
    assert.deepEqual(outcomes, rows.map((r) => ({ id: r.id, status: 'sent' })));
    assert.deepEqual(seen.map((ids) => ids.length).sort(), [10, 2]);
    for (const ids of seen) for (const id of ids) assert.match(id, /^\d+$/, 'entry ids are short batch-local indexes');
  });

  const wholeCall: Array<[string, () => Error, 'retryable' | 'permanent', RegExp]> = [
    ['a ThrottlingException', () => serviceError('ThrottlingException', 400, { $retryable: { throttling: true } }), 'retryable', /ThrottlingException HTTP 400/],
    ['RequestThrottled', () => new RequestThrottled({ message: 'slow down', $metadata: { httpStatusCode: 403 } }), 'retryable', /RequestThrottled/],
    ['KMS.ThrottlingException', () => serviceError('KMS.ThrottlingException', 400), 'retryable', /KMS\.ThrottlingException/],
    ['KmsThrottled', () => new KmsThrottled({ message: 'kms busy', $metadata: { httpStatusCode: 400 } }), 'retryable', /KmsThrottled/],
    ['an error the SDK marks $retryable', () => serviceError('SomethingTransient', 400, { $retryable: {} }), 'retryable', /SomethingTransient/],
    ['HTTP 500', () => serviceError('InternalError', 500), 'retryable', /InternalError HTTP 500/],
    ['HTTP 503', () => serviceError('ServiceUnavailable', 503), 'retryable', /ServiceUnavailable HTTP 503/],
    ['a socket reset', () => Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }), 'retryable', /Error \(ECONNRESET\): socket hang up/],
    [
      'a missing queue',
      () => Object.assign(new QueueDoesNotExist({ message: 'The specified queue does not exist.', $metadata: { httpStatusCode: 400 } }), { Code: 'AWS.SimpleQueueService.NonExistentQueue' }),
      'permanent',
      /QueueDoesNotExist \(AWS\.SimpleQueueService\.NonExistentQueue\) HTTP 400/,
    ],
    ['InvalidParameterValue', () => serviceError('InvalidParameterValue', 400), 'permanent', /InvalidParameterValue HTTP 400/],
    ['BatchRequestTooLong', () => new BatchRequestTooLong({ message: 'too long', $metadata: { httpStatusCode: 400 } }), 'permanent', /BatchRequestTooLong/],
    ['AccessDenied', () => serviceError('AccessDenied', 403), 'permanent', /AccessDenied HTTP 403/],
  ];
  for (const [what, error, status, text] of wholeCall) {
    it(`classifies ${what} on the whole call as ${status} for every entry${status === 'permanent' ? ' (attempts are still spent)' : ''}`, async () => {
      const { mock, destination } = mockedDestination();
      mock.on(SendMessageBatchCommand).rejects(error());
      const rows = [outboundMessage(), outboundMessage(), outboundMessage()];
      const outcomes = await destination.publishBatch(rows);
      assert.deepEqual(outcomes.map((o) => o.id), rows.map((r) => r.id));
      assert.deepEqual(outcomes.map(statusAndDeadNow), rows.map(() => [status, undefined]));
      for (const outcome of outcomes) assert.match((outcome as { error: string }).error, text);
    });
  }

  it('keeps dead-now rows apart from a whole-call failure of the others', async () => {
    const { mock, destination } = mockedDestination();
    mock.on(SendMessageBatchCommand).rejects(serviceError('ServiceUnavailable', 503));
    const tooBig = outboundMessage({ payload: { blob: 'x'.repeat(1_100_000) } });
    const ok = outboundMessage();
    const outcomes = await destination.publishBatch([tooBig, ok]);
    assert.deepEqual(outcomes.map(statusAndDeadNow), [['permanent', true], ['retryable', undefined]]);
  });
});
