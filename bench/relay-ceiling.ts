/**
 * A measuring stick, not product code: a pure byte relay over Bun's own TLS sockets (Bun.listen /
 * Bun.connect), as ghostunnel relays, with no HTTP parsing and no SPIFFE ID check (the server side has
 * BoringSSL verify the chain against the CA; per-connection checks are amortised by keep-alive anyway).
 * What a side cannot take yet is queued (the relay's Outbox) and the other side paused meanwhile.
 * bench/http.ts and bench/grpc.ts run a client→server pair of it to show the ceiling of a relay-based
 * listener design on Bun's sockets.
 *
 *   bun bench/relay-ceiling.ts client|server <listenPort> <targetPort> <cert.pem> <key.pem> <ca.pem>
 */
import { readFileSync } from "node:fs";
import type { Socket } from "bun";
import { Outbox } from "../proxy/http/relay/outbox.ts";

const [mode, listen, target, certFile, keyFile, caFile] = process.argv.slice(2);
const read = (f: string | undefined) => readFileSync(f as string, "utf8");
const tls = { cert: read(certFile), key: read(keyFile), ca: read(caFile) };
const HIGH_WATER = 256 * 1024;

interface Side {
  socket: Socket<Side>;
  out: Outbox;
  peer: Side | undefined;
  pending: Uint8Array[];
}

const side = (socket: Socket<Side>): Side => ({
  socket,
  out: new Outbox(socket as Socket<unknown>),
  peer: undefined,
  pending: [],
});

/** Writes `chunk` to `to`, pausing `from` while `to` has too much queued. */
function pass(from: Side, to: Side, chunk: Uint8Array): void {
  to.out.add(chunk);
  to.out.flush();
  if (to.out.queued > HIGH_WATER) from.socket.pause();
}

const handlers = {
  data(s: Socket<Side>, chunk: Uint8Array) {
    const me = s.data;
    if (me.peer) pass(me, me.peer, chunk);
    else me.pending.push(new Uint8Array(chunk));
  },
  drain(s: Socket<Side>) {
    const me = s.data;
    if (me.out.drain()) me.peer?.socket.resume();
  },
  close(s: Socket<Side>) {
    s.data.peer?.socket.end();
  },
  error() {},
};

function relay(inbound: Socket<Side>, connectTls: boolean): void {
  inbound.data = side(inbound);
  const ready = (out: Socket<Side>) => {
    out.data.peer = inbound.data;
    inbound.data.peer = out.data;
    for (const chunk of inbound.data.pending) pass(inbound.data, out.data, chunk);
    inbound.data.pending = [];
  };
  void Bun.connect<Side>({
    hostname: "127.0.0.1",
    port: Number(target),
    ...(connectTls ? { tls: { ...tls, rejectUnauthorized: false } } : {}),
    socket: {
      ...handlers,
      open(out) {
        out.data = side(out);
        if (!connectTls) ready(out);
      },
      handshake(out) {
        ready(out);
      },
    },
  });
}

Bun.listen<Side>({
  hostname: "127.0.0.1",
  port: Number(listen),
  ...(mode === "server" ? { tls: { ...tls, requestCert: true, rejectUnauthorized: true } } : {}),
  socket: {
    ...handlers,
    open(inbound) {
      relay(inbound, mode === "client");
    },
  },
});
