/**
 * An SQS record as Lambda delivers it to the SQS inbox receiver: `body` from queue `queue` (the
 * last part of `eventSourceARN`, which picks the inbox source).
 */
import type { SQSRecord } from 'aws-lambda';

export function sqsRecord(messageId: string, body: string, queue: string): SQSRecord {
  return {
    messageId,
    receiptHandle: `rh-${messageId}`,
    body,
    attributes: { ApproximateReceiveCount: '1', SentTimestamp: '0', SenderId: 's', ApproximateFirstReceiveTimestamp: '0' },
    messageAttributes: {},
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: `arn:aws:sqs:eu-west-1:000000000000:${queue}`,
    awsRegion: 'eu-west-1',
  };
}
