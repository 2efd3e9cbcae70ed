import { createHash } from "node:crypto";
import { connect, createServer, type Server } from "node:net";

/**
 * TCP peers for relay tests. The digest server reads until the caller half-closes, then answers with the
 * SHA-256 and length of what it received and closes: only a relay that carries every byte and passes the
 * half-close on gets the right answer back.
 */
export interface DigestServer {
  server: Server;
  port: number;
  /** Connections accepted so far. */
  connections(): number;
}

export async function startDigestServer(): Promise<DigestServer> {
  let connections = 0;
  const server = createServer({ allowHalfOpen: true }, (socket) => {
    connections++;
    const hash = createHash("sha256");
    let length = 0;
    socket.on("data", (d) => {
      hash.update(d);
      length += d.length;
    });
    socket.on("end", () => socket.end(`${hash.digest("hex")} ${length}\n`));
    socket.on("error", () => {});
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  return { server, port: (server.address() as { port: number }).port, connections: () => connections };
}

/**
 * Sends `total` bytes of a repeating random block (with backpressure), half-closes, and returns what came
 * back and the SHA-256 and length of what was sent, in the digest server's format.
 */
export function sendAndDigest(port: number, total: number): Promise<{ sent: string; reply: string }> {
  const block = crypto.getRandomValues(new Uint8Array(1 << 20));
  const hash = createHash("sha256");
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: "127.0.0.1", allowHalfOpen: true });
    let reply = "";
    let sent = 0;
    const pump = () => {
      while (sent < total) {
        const chunk = block.subarray(0, Math.min(block.length, total - sent));
        hash.update(chunk);
        sent += chunk.length;
        if (!s.write(chunk)) return void s.once("drain", pump);
      }
      s.end();
    };
    s.once("connect", pump);
    s.on("data", (d) => {
      reply += d;
    });
    s.on("close", () => resolve({ sent: `${hash.digest("hex")} ${sent}\n`, reply }));
    s.on("error", reject);
  });
}
