import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createServer as httpServer, type Server } from "node:http";
import { connect, type Server as TcpServer, createServer as tcpServer } from "node:net";
import mqttPacket from "mqtt-packet";
import { type DevApi, onlyProd as only, startProdApis, tempDir } from "../support/dev-api.ts";
import { type Broker, startBroker } from "../support/mosquitto.ts";
import { mqttClient } from "../support/mqtt-clients.ts";
import { freePort } from "../support/net.ts";
import { type Proc, stopAll } from "../support/proc.ts";
import { logLines, startSvcProxy, waitForLog } from "../support/proxy.ts";
import { waitUntil } from "../support/wait.ts";

/**
 * One proxy with a listener of every kind (HTTP on the relay, HTTP on the full path, TCP, MQTT): a fault
 * is driven into each (a malformed response, a target that resets mid-response, a caller that resets, a
 * malformed MQTT packet). Each ends its own exchange or connection with a log line; the process and every
 * listener, the faulted ones included, go on serving.
 */
const dir = tempDir();
let apis: Record<string, DevApi>;
let upstream: Server;
let echo: TcpServer;
let broker: Broker;
let web: Proc;
const port: Record<string, number> = {};

beforeAll(async () => {
  apis = await startProdApis(dir, ["web", "api"]);
  broker = await startBroker(dir, await freePort());
  upstream = httpServer((req, res) => {
    if (req.url === "/malformed") {
      req.socket.end("HTTP/1.1 200 OK\r\ncontent-length: nope\r\n\r\n");
      return;
    }
    if (req.url === "/reset") {
      res.writeHead(200, { "content-length": "100" });
      res.write("partial");
      setImmediate(() => req.socket.destroy());
      return;
    }
    res.end("ok");
  });
  echo = tcpServer((s) => s.pipe(s));
  await Promise.all([
    new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r)),
    new Promise<void>((r) => echo.listen(0, "127.0.0.1", r)),
  ]);
  const http = `http://127.0.0.1:${(upstream.address() as { port: number }).port}`;
  for (const k of ["relay", "full", "tcp", "mqtt", "apiTcp", "apiMqtt", "metrics"])
    port[k] = await freePort();
  await startSvcProxy({
    spiffe: { workload_socket_path: apis.api?.socket },
    metricsAddr: "0",
    listeners: [
      {
        name: "tcp",
        protocol: "tcp",
        mode: "server",
        address: `127.0.0.1:${port.apiTcp}`,
        target: { url: `tcp://127.0.0.1:${(echo.address() as { port: number }).port}` },
        source: { spiffe_ids: only("web") },
      },
      {
        name: "mqtt",
        protocol: "mqtt",
        mode: "server",
        address: `127.0.0.1:${port.apiMqtt}`,
        target: { url: `mqtt://127.0.0.1:${broker.port}` },
        source: { spiffe_ids: only("web") },
      },
    ],
  });
  web = await startSvcProxy(
    {
      spiffe: { workload_socket_path: apis.web?.socket },
      metricsAddr: `127.0.0.1:${port.metrics}`,
      listeners: [
        { name: "relay", mode: "client", address: `127.0.0.1:${port.relay}`, target: { url: http } },
        {
          name: "full",
          mode: "client",
          address: `127.0.0.1:${port.full}`,
          target: { url: http },
          middlewares: [{ type: "dummy" }],
        },
        {
          name: "tcp",
          protocol: "tcp",
          mode: "client",
          address: `127.0.0.1:${port.tcp}`,
          target: { url: `tls://127.0.0.1:${port.apiTcp}`, spiffe_ids: only("api") },
        },
        {
          name: "mqtt",
          protocol: "mqtt",
          mode: "client",
          address: `127.0.0.1:${port.mqtt}`,
          target: { url: `mqtts://127.0.0.1:${port.apiMqtt}`, spiffe_ids: only("api") },
        },
      ],
    },
    [],
    {},
    ["--preload", "./tests/support/fault-preload.ts"],
  );
});
afterAll(async () => {
  upstream.close();
  echo.close();
  await broker.stop();
  await stopAll();
});

/** Sends `text` through the TCP listener and resolves with what the echo target sent back. */
function echoOnce(p: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = "";
    const s = connect(p, "127.0.0.1", () => s.write(text));
    s.on("data", (d: Buffer) => {
      got += d.toString();
      if (got.length >= text.length) {
        s.destroy();
        resolve(got);
      }
    });
    s.on("error", reject);
  });
}

async function everyListenerServes(): Promise<void> {
  expect(await (await fetch(`http://127.0.0.1:${port.relay}/`)).text()).toBe("ok");
  expect(await (await fetch(`http://127.0.0.1:${port.full}/`)).text()).toBe("ok");
  expect(await echoOnce(port.tcp as number, "ping\n")).toBe("ping\n");
  const client = await mqttClient(port.mqtt as number);
  await client.publishAsync("faults/ok", "yes", { qos: 1 });
  await client.endAsync();
  expect(web.proc.exitCode).toBeNull();
}

describe("a fault on one exchange or connection of each listener kind", () => {
  test("every listener serves before the faults", everyListenerServes);

  test("relay: a malformed response is a 502 with a log line", async () => {
    const r = await fetch(`http://127.0.0.1:${port.relay}/malformed`);
    expect(r.status).toBe(502);
    await waitUntil("the upstream failure log line", () =>
      logLines(web).some((l) => l.listener === "relay" && l.msg === "upstream failure"),
    );
  });

  for (const kind of ["relay", "full"] as const) {
    test(`${kind}: a target that resets mid-response ends that exchange at once`, async () => {
      const outcome = await fetch(`http://127.0.0.1:${port[kind]}/reset`)
        .then(async (r) => `status ${r.status}, body ${(await r.text()).length}`)
        .catch(() => "connection closed");
      // The head was passed on, so the caller's connection is closed mid-body (not left waiting).
      expect(outcome).toBe("connection closed");
    });
  }

  test("tcp: a caller that resets its connection ends only that connection", async () => {
    await new Promise<void>((resolve) => {
      const s = connect(port.tcp as number, "127.0.0.1", () => {
        s.write("half a message");
        s.resetAndDestroy();
      });
      s.on("error", () => {});
      s.on("close", () => resolve());
    });
  });

  test("mqtt: a malformed packet closes that connection with the reason logged", async () => {
    await new Promise<void>((resolve) => {
      const s = connect(port.mqtt as number, "127.0.0.1", () =>
        s.write(mqttPacket.generate({ cmd: "connect", clientId: "bad", protocolVersion: 4 } as never)),
      );
      s.once("data", () => s.write(Buffer.from([0x30, 0xff, 0xff, 0xff, 0xff, 0x01])));
      s.on("error", () => {});
      s.on("close", () => resolve());
    });
    await waitUntil("the mqtt connection closed log line", () =>
      logLines(web).some((l) => l.listener === "mqtt" && l.msg === "connection closed"),
    );
  });

  test("mqtt 5: a malformed packet is answered with DISCONNECT 0x81 and its reason before the close", async () => {
    const got = await new Promise<mqttPacket.Packet[]>((resolve) => {
      const packets: mqttPacket.Packet[] = [];
      const parser = mqttPacket.parser({ protocolVersion: 5 });
      parser.on("packet", (p) => packets.push(p));
      const s = connect(port.mqtt as number, "127.0.0.1", () =>
        s.write(
          mqttPacket.generate({ cmd: "connect", clientId: "bad5", protocolVersion: 5 } as never, {
            protocolVersion: 5,
          }),
        ),
      );
      s.on("data", (d: Buffer) => {
        const first = packets.length === 0;
        parser.parse(d);
        if (first && packets.length > 0) s.write(Buffer.from([0x30, 0xff, 0xff, 0xff, 0xff, 0x01]));
      });
      s.on("error", () => {});
      s.on("close", () => resolve(packets));
    });
    expect(got.map((p) => p.cmd)).toEqual(["connack", "disconnect"]);
    const disconnect = got[1] as mqttPacket.IDisconnectPacket;
    expect(disconnect.reasonCode).toBe(0x81);
    expect(disconnect.properties?.reasonString).toStartWith("malformed MQTT packet from the caller");
  });

  test("full: the target's reset is logged as its failure, never counted as the caller's cancellation", async () => {
    await waitUntil(
      "the response-interrupted log line",
      () =>
        logLines(web).some(
          (l) =>
            l.listener === "full" && l.msg === "upstream failure" && l.failure === "response-interrupted",
        ),
      10_000,
    );
    const text = await (await fetch(`http://127.0.0.1:${port.metrics}/metrics`)).text();
    expect(text).not.toContain('svc_proxy_http_requests_total{listener="full",code="499"}');
  });

  test("after the faults, the process and every listener still serve", everyListenerServes);

  test("the faults are counted: the 502, and the MQTT connections ended by malformed packets", async () => {
    const text = await (await fetch(`http://127.0.0.1:${port.metrics}/metrics`)).text();
    expect(text).toMatch(/svc_proxy_http_requests_total\{listener="relay",code="502"\} [1-9]/);
    expect(text).toMatch(/svc_proxy_stream_failures_total\{listener="mqtt",reason="malformed"\} 2/);
  });
});

describe("a fault of the proxy's own outside any connection (injected by tests/support/fault-preload.ts)", () => {
  test("an uncaught exception and an unhandled rejection are logged with their stacks; every listener still serves", async () => {
    web.proc.kill("SIGUSR2");
    const [thrown, rejected] = await Promise.all([
      waitForLog(web, "internal fault: uncaught exception"),
      waitForLog(web, "internal fault: unhandled rejection"),
    ]);
    expect(thrown).toMatchObject({ level: "error", error: "injected fault" });
    expect(rejected).toMatchObject({ level: "error", error: "injected rejection" });
    // -zap-stacktrace-level is error by default: the error's own stack, naming where it was thrown.
    expect(thrown.stacktrace).toContain("fault-preload.ts");
    expect(rejected.stacktrace).toContain("fault-preload.ts");
    await everyListenerServes();
  });
});
