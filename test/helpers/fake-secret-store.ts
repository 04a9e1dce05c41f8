/**
 * A local endpoint answering Secrets Manager `GetSecretValue` and SSM `GetParameter` as AWS does
 * (JSON 1.1 protocol), so tests drive the real AWS SDK and Powertools Parameters against it.
 * Point the SDK at it with `AWS_ENDPOINT_URL`. `values` is what the store holds (set a new value
 * to rotate); `calls` lists every request as `<target>:<name>`. With `hang` set, a request is
 * never answered (an endpoint that does not respond; `stop()` ends it); `delayMs` answers late.
 */
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** The stand-in; `start()` returns its endpoint URL. */
export class FakeSecretStore {
  readonly values = new Map<string, string>();
  readonly calls: string[] = [];
  /** When true, requests get no answer until `stop()`. */
  hang = false;
  /** Milliseconds to wait before answering. */
  delayMs = 0;
  /** For each request held unanswered (`hang`) that the client ended: how long it was held (ms). */
  readonly endedByClient: number[] = [];
  #held = new Set<ServerResponse>();
  #server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      const target = String(req.headers['x-amz-target']);
      const input = JSON.parse(body) as { SecretId?: string; Name?: string };
      const name = input.SecretId ?? input.Name ?? '';
      this.calls.push(`${target}:${name}`);
      if (this.hang) {
        this.#held.add(res);
        const heldAt = Date.now();
        res.on('close', () => {
          if (this.#held.delete(res)) this.endedByClient.push(Date.now() - heldAt);
        });
        return;
      }
      if (this.delayMs > 0) {
        this.#held.add(res);
        setTimeout(() => this.#answer(target, name, res), this.delayMs);
        return;
      }
      this.#answer(target, name, res);
    });
  });
  #answer(target: string, name: string, res: ServerResponse): void {
    this.#held.delete(res);
    if (res.destroyed) return;
    const value = this.values.get(name);
    res.setHeader('content-type', 'application/x-amz-json-1.1');
    if (value === undefined) {
      res.statusCode = 400;
      res.end(JSON.stringify({ __type: target.startsWith('secretsmanager') ? 'ResourceNotFoundException' : 'ParameterNotFound', message: 'not found' }));
    } else if (target === 'secretsmanager.GetSecretValue') {
      res.end(JSON.stringify({ ARN: `arn:aws:secretsmanager:eu-west-1:000000000000:secret:${name}`, Name: name, SecretString: value, VersionId: 'v', CreatedDate: 0 }));
    } else {
      res.end(JSON.stringify({ Parameter: { Name: name, Type: 'SecureString', Value: value, Version: 1 } }));
    }
  }
  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }
  stop(): Promise<void> {
    for (const res of this.#held) res.destroy();
    this.#held.clear();
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }
}
