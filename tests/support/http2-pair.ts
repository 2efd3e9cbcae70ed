import http2 from "node:http2";
import { type DevApi, onlyProd as only } from "./dev-api.ts";
import { freePort } from "./net.ts";
import type { Proc } from "./proc.ts";
import { startSvcProxy } from "./proxy.ts";

/**
 * A client→server svc-proxy pair whose listeners set connection.http2: a server-mode proxy as `api` in
 * front of an HTTP/2 target, and a client-mode proxy as `web` in front of it. `client` adds to the client
 * listener (middlewares), `clientAllows` and `serverAllows` replace the patterns of each side, and
 * `metricsAddr` is the client proxy's.
 */
export async function startHttp2Pair(
  apis: Record<string, DevApi>,
  targetPort: number,
  o: {
    client?: Record<string, unknown>;
    clientAllows?: string[];
    serverAllows?: string[];
    metricsAddr?: string;
  } = {},
): Promise<{ clientPort: number; serverPort: number; client: Proc; server: Proc }> {
  const [serverPort, clientPort] = [await freePort(), await freePort()];
  const config = (sa: string, listener: Record<string, unknown>, metricsAddr = "0") => ({
    spiffe: { workload_socket_path: apis[sa]?.socket },
    metricsAddr,
    listeners: [{ name: "grpc", connection: { http2: true }, ...listener }],
  });
  const server = await startSvcProxy(
    config("api", {
      address: `127.0.0.1:${serverPort}`,
      mode: "server",
      target: { url: `http://127.0.0.1:${targetPort}` },
      source: { spiffe_ids: o.serverAllows ?? only("web") },
    }),
  );
  const client = await startSvcProxy(
    config(
      "web",
      {
        address: `127.0.0.1:${clientPort}`,
        mode: "client",
        target: { url: `https://127.0.0.1:${serverPort}`, spiffe_ids: o.clientAllows ?? only("api") },
        ...o.client,
      },
      o.metricsAddr,
    ),
  );
  return { clientPort, serverPort, client, server };
}

/**
 * An HTTP/2 target that answers every request "ok" once it has read it, on a free loopback port. A
 * stream its caller reset first is left alone (Bun's node:http2 throws when it is answered, even while
 * the stream does not say it is destroyed).
 */
export async function startOkHttp2Target(): Promise<{ port: number; close(): void }> {
  const target = http2.createServer((req, res) => {
    req.on("error", () => {});
    res.stream.on("error", () => {});
    req.resume();
    req.on("end", () => {
      try {
        res.end("ok");
      } catch {
        // reset by its caller already
      }
    });
  });
  await new Promise<void>((r) => target.listen(0, "127.0.0.1", () => r()));
  return { port: (target.address() as { port: number }).port, close: () => target.close() };
}

/** A GET of `path` on an HTTP/2 `session`, which is then closed: the answer's body. */
export async function h2Get(session: http2.ClientHttp2Session, path = "/"): Promise<string> {
  const req = session.request({ ":path": path });
  req.end();
  let body = "";
  req.on("data", (d) => {
    body += d;
  });
  await new Promise((resolve, reject) => {
    req.on("end", resolve);
    req.on("error", reject);
  });
  session.close();
  return body;
}
