/**
 * A local endpoint speaking the Lambda Invoke API for tests, so the real
 * `@aws-sdk/client-lambda` client talks to it with only `endpoint` changed:
 * `POST /2015-03-31/functions/{FunctionName}/invocations`. An asynchronous invoke
 * (`X-Amz-Invocation-Type: Event`) is answered HTTP 202 with an empty body and kept, with its
 * parsed payload, in `invocations` (`functionName` as sent: `name` or `name:qualifier`); a request/response invoke is refused (the code under test
 * never makes one). An unknown function answers 404 `ResourceNotFoundException`.
 *
 * Faults: `fail(kind)` answers every later invoke with `ResourceNotFoundException` (404, which the
 * SDK does not retry) or `ServiceException` (500, which it retries by its own policy) until
 * `fail(undefined)`; `fail('hang')` reads every later invoke and never answers it (an endpoint that
 * stopped answering: the caller's own timeout ends the wait). Signatures are not checked. It listens on 127.0.0.1 only.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { lambdaInvoker, type InvokeAsync } from '../../lib/runtime/self-invoke.ts';

/** One accepted asynchronous invoke. */
export interface LocalInvocation {
  functionName: string;
  payload: Record<string, unknown>;
}

export interface LocalLambda {
  /** `http://127.0.0.1:<port>`. */
  readonly endpoint: string;
  /** Accepted asynchronous invokes, in arrival order. */
  readonly invocations: LocalInvocation[];
  /** Requests received (accepted or refused). */
  readonly requests: number;
  /** Refuses every later invoke with this error, until `undefined`. */
  fail(kind: Fault | undefined): void;
  /** An `InvokeAsync` over the real SDK client pointed at this endpoint. */
  invoker(): InvokeAsync;
  close(): Promise<void>;
}

type Fault = 'ResourceNotFoundException' | 'ServiceException' | 'hang';

const PATH = /^\/2015-03-31\/functions\/([^/]+)\/invocations$/;

/** Starts the endpoint; `functions` are the function names that exist. */
export async function startLocalLambda(functions: readonly string[]): Promise<LocalLambda> {
  const invocations: LocalInvocation[] = [];
  let requests = 0;
  let failing: Fault | undefined;
  const refuse = (res: ServerResponse, status: number, type: string, message: string) => {
    res.writeHead(status, { 'content-type': 'application/json', 'x-amzn-errortype': type });
    res.end(JSON.stringify({ Type: status >= 500 ? 'Service' : 'User', message }));
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      requests++;
      const match = PATH.exec(new URL(req.url ?? '/', 'http://local').pathname);
      if (req.method !== 'POST' || match === null) return refuse(res, 404, 'UnknownOperationException', `no operation at ${req.method} ${req.url}`);
      // `name:qualifier` (an alias or version) invokes that function's alias or version.
      const name = decodeURIComponent(match[1]!);
      const unqualified = name.split(':')[0]!;
      if (failing === 'hang') return;
      if (failing === 'ServiceException') return refuse(res, 500, 'ServiceException', 'the service failed (local fault)');
      if (failing === 'ResourceNotFoundException' || !functions.includes(unqualified)) return refuse(res, 404, 'ResourceNotFoundException', `Function not found: ${name}`);
      if (req.headers['x-amz-invocation-type'] !== 'Event') return refuse(res, 400, 'InvalidParameterValueException', 'this endpoint accepts asynchronous invokes (X-Amz-Invocation-Type: Event) only');
      invocations.push({ functionName: name, payload: JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Record<string, unknown> });
      res.writeHead(202, { 'x-amzn-requestid': `local-${requests}` });
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const clients: LambdaClient[] = [];
  return {
    endpoint,
    invocations,
    get requests() {
      return requests;
    },
    fail(kind) {
      failing = kind;
    },
    invoker() {
      return lambdaInvoker(() => {
        const client = new LambdaClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' }, maxAttempts: 2 });
        clients.push(client);
        return client;
      });
    },
    async close() {
      for (const client of clients) client.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
