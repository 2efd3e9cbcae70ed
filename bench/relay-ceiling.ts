/**
 * A measuring stick, not product code: a pure byte relay over Bun's own TLS sockets (Bun.listen /
 * Bun.connect), as ghostunnel relays, with no HTTP parsing and no SPIFFE ID check (the server side has
 * BoringSSL verify the chain against the CA; per-connection checks are amortised by keep-alive anyway).
 * bench/http.ts runs a client→server pair of it to show the ceiling of a relay-based listener design.
 *
 *   bun bench/relay-ceiling.ts client|server <listenPort> <targetPort> <cert.pem> <key.pem> <ca.pem>
 */
import { readFileSync } from "node:fs";

const [mode, listen, target, certFile, keyFile, caFile] = process.argv.slice(2);
const read = (f: string | undefined) => readFileSync(f as string, "utf8");
const tls = { cert: read(certFile), key: read(keyFile), ca: read(caFile) };

interface Side {
  peer: import("bun").Socket<Side> | undefined;
  pending: Uint8Array[];
}

function relay(inbound: import("bun").Socket<Side>, connectTls: boolean): void {
  inbound.data = { peer: undefined, pending: [] };
  const ready = (out: import("bun").Socket<Side>) => {
    inbound.data.peer = out;
    for (const chunk of inbound.data.pending) out.write(chunk);
    inbound.data.pending = [];
  };
  void Bun.connect<Side>({
    hostname: "127.0.0.1",
    port: Number(target),
    ...(connectTls ? { tls: { ...tls, rejectUnauthorized: false } } : {}),
    socket: {
      open(out) {
        out.data = { peer: inbound, pending: [] };
        if (!connectTls) ready(out);
      },
      handshake(out) {
        ready(out);
      },
      data(_out, chunk) {
        inbound.write(chunk);
      },
      close() {
        inbound.end();
      },
      error() {
        inbound.end();
      },
    },
  });
}

Bun.listen<Side>({
  hostname: "127.0.0.1",
  port: Number(listen),
  ...(mode === "server" ? { tls: { ...tls, requestCert: true, rejectUnauthorized: true } } : {}),
  socket: {
    open(inbound) {
      relay(inbound, mode === "client");
    },
    data(inbound, chunk) {
      if (inbound.data.peer) inbound.data.peer.write(chunk);
      else inbound.data.pending.push(new Uint8Array(chunk));
    },
    close(inbound) {
      inbound.data.peer?.end();
    },
    error() {},
  },
});
