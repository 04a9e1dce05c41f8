/**
 * A TCP proxy on 127.0.0.1 in front of the test's PostgreSQL server that can be made to stall:
 * the connections stay open but no bytes pass either way, as in a network partition or a failover
 * that leaves the client's socket open. New connections are still accepted then, and stall in
 * their start-up. The bytes held meanwhile pass when the proxy passes again (as TCP delivers them
 * once a partition heals), on the connections still open.
 */
import net from 'node:net';

export interface StallProxy {
  /** `url` (a database URL on the test server) through the proxy. */
  through(url: string): string;
  /** Whether bytes pass (`'pass'`: the ones held first) or are held (`'stall'`), on every connection. */
  set(mode: 'pass' | 'stall'): void;
  /** Connections from clients the proxy still has open (a client that closed its side is gone). */
  openConnections(): number;
  /** Ends every connection, as a proxy restart does (a client waiting on one gets an error). */
  endAll(): void;
  close(): Promise<void>;
}

/** Starts a proxy to the server of `url` (host and port). */
export async function startStallProxy(url: string): Promise<StallProxy> {
  const target = new URL(url);
  let mode: 'pass' | 'stall' = 'pass';
  const inbound = new Set<net.Socket>();
  const sockets = new Set<net.Socket>();
  /** Per direction of each connection: sends what it holds, once passing. */
  const flushes = new Set<() => void>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    inbound.add(client);
    sockets.add(client).add(upstream);
    const pipe = (from: net.Socket, to: net.Socket) => {
      const held: Buffer[] = [];
      const flush = () => {
        while (held.length > 0 && !to.destroyed) to.write(held.shift()!);
      };
      flushes.add(flush);
      from.on('data', (chunk: Buffer) => {
        held.push(chunk);
        if (mode === 'pass') flush();
      });
      return flush;
    };
    const both = [pipe(client, upstream), pipe(upstream, client)];
    const end = () => {
      client.destroy();
      upstream.destroy();
      inbound.delete(client);
      sockets.delete(client);
      sockets.delete(upstream);
      for (const flush of both) flushes.delete(flush);
    };
    for (const socket of [client, upstream]) socket.on('error', end).on('close', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    through(databaseUrl) {
      const proxied = new URL(databaseUrl);
      proxied.hostname = '127.0.0.1';
      proxied.port = String(port);
      return proxied.toString();
    },
    set(next) {
      mode = next;
      if (mode === 'pass') for (const flush of flushes) flush();
    },
    openConnections: () => inbound.size,
    endAll() {
      for (const socket of sockets) socket.destroy();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
