/**
 * An API Gateway HTTP API request (payload 2.0) as Lambda delivers it to the HTTP inbox receiver.
 */
import type { APIGatewayProxyEventV2 } from 'aws-lambda';

/** A request to `path` with `body` and `headers`; POST and a plain (not base64) body by default. */
export function apiGatewayV2Event(path: string, body: string, headers: Record<string, string> = {}, method = 'POST', isBase64Encoded = false): APIGatewayProxyEventV2 {
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: path,
    rawQueryString: '',
    headers,
    requestContext: {
      accountId: '000000000000',
      apiId: 'api',
      domainName: 'example.com',
      domainPrefix: 'example',
      http: { method, path, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'test' },
      requestId: 'r',
      routeKey: '$default',
      stage: '$default',
      time: '',
      timeEpoch: 0,
    },
    body,
    isBase64Encoded,
  };
}
