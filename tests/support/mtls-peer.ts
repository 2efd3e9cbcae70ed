/**
 * A test peer built on lib/tls: `server` accepts SPIFFE mTLS and echoes; `client` makes connections and
 * reports what happened as one JSON line. Runs as its own process so that each side has its own
 * Workload API socket and identity, as two workloads would.
 */
import { parseArgs } from "node:util";
import { authorizeMatching } from "../../lib/spiffe/authorizer.ts";
import { X509Source } from "../../lib/spiffe/x509-source.ts";
import { openKeyLog } from "../../lib/tls/keylog.ts";
import { connectMtls, createMtlsServer, type MtlsPolicy } from "../../lib/tls/mtls.ts";

const { values: o, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    socket: { type: "string" },
    allow: { type: "string", multiple: true, default: [] },
    keylog: { type: "string" },
    port: { type: "string" },
    count: { type: "string", default: "1" },
    interval: { type: "string", default: "0" },
    hold: { type: "boolean", default: false },
  },
});

const out = (v: unknown) => process.stdout.write(`${JSON.stringify(v)}\n`);
const source = await X509Source.open({ address: o.socket as string, timeoutMs: 15_000 });
const policy: MtlsPolicy = {
  source,
  authorize: authorizeMatching(o.allow as string[]),
  ...(o.keylog ? { keylog: openKeyLog(o.keylog) } : {}),
};
const serial = () => source.getX509Svid().chain[0]?.native.serialNumber;

if (positionals[0] === "server") {
  const { server } = createMtlsServer(policy, {
    onConnection(socket, peer) {
      out({ accepted: peer.id.uri });
      socket.write(`hello ${peer.id.uri} ${serial()}\n`);
      socket.on("data", (d) => socket.write(d));
      socket.on("error", () => {});
    },
    onReject(e) {
      out({ rejected: e.message, code: e.code });
    },
  });
  server.listen(0, "127.0.0.1", () => out({ listening: (server.address() as { port: number }).port }));
} else {
  const port = Number(o.port);
  const errors: string[] = [];
  const serverSerials = new Set<string>();
  const clientSerials = new Set<string>();
  const serverIds = new Set<string>();
  let ok = 0;

  // One exchange: send a line, wait for the echo.
  const exchange = (socket: import("node:tls").TLSSocket, msg: string) =>
    new Promise<void>((resolve, reject) => {
      let got = "";
      const onData = (d: Buffer) => {
        got += d;
        if (got.includes(`${msg}\n`)) {
          socket.off("data", onData);
          resolve();
        }
      };
      socket.on("data", onData);
      socket.once("close", () => reject(new Error(`connection closed before the echo of ${msg}`)));
      socket.write(`${msg}\n`);
    });

  const greeting = (socket: import("node:tls").TLSSocket) =>
    new Promise<string>((resolve, reject) => {
      let got = "";
      socket.on("data", function onData(d: Buffer) {
        got += d;
        const nl = got.indexOf("\n");
        if (nl >= 0) {
          socket.off("data", onData);
          resolve(got.slice(0, nl));
        }
      });
      socket.once("close", () => reject(new Error("connection closed by the server before its greeting")));
      socket.once("error", reject);
    });

  let held: import("node:tls").TLSSocket | undefined;
  let heldOk = 0;
  if (o.hold) {
    const c = await connectMtls({ host: "127.0.0.1", port, policy });
    held = c.socket;
    await greeting(held);
  }
  for (let i = 0; i < Number(o.count); i++) {
    try {
      clientSerials.add(serial() ?? "");
      const { socket, peer } = await connectMtls({ host: "127.0.0.1", port, policy });
      serverIds.add(peer.id.uri);
      serverSerials.add(peer.chain[0]?.native.serialNumber ?? "");
      const hello = greeting(socket);
      await hello;
      await exchange(socket, `ping-${i}`);
      socket.end();
      ok++;
    } catch (e) {
      errors.push((e as Error).message);
    }
    if (held) {
      try {
        await exchange(held, `held-${i}`);
        heldOk++;
      } catch (e) {
        errors.push(`held connection: ${(e as Error).message}`);
      }
    }
    if (Number(o.interval) > 0) await Bun.sleep(Number(o.interval));
  }
  held?.end();
  out({
    result: {
      ok,
      failed: errors.length,
      errors: [...new Set(errors)],
      serverIds: [...serverIds],
      serverSerials: serverSerials.size,
      clientSerials: clientSerials.size,
      heldOk,
    },
  });
  source.close();
  policy.keylog?.close();
  process.exit(0);
}
