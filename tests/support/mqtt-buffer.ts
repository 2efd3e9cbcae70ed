import type { DevApi } from "./dev-api.ts";
import { metricValue } from "./metrics.ts";
import { type Broker, startBroker } from "./mosquitto.ts";
import { freePort } from "./net.ts";
import type { Proc } from "./proc.ts";
import { startSvcProxy, waitForLog } from "./proxy.ts";
import { waitUntil } from "./wait.ts";

/**
 * A broker, a server proxy in front of it (down unless `linkUp`, so the buffer cannot deliver until
 * linkUp() while subscribers are already listening), and a client proxy whose MQTT listener "mqtt" has
 * the buffer middleware `buffer`. `restart()` starts the client proxy again with the same configuration
 * (after a kill), `config` is that configuration.
 */
export interface Buffered {
  port: number;
  metricsPort: number;
  client: Proc;
  broker: Broker;
  config: object;
  linkUp(): Promise<Proc>;
  restart(): Promise<Proc>;
  /** A sample's value from the client proxy's /metrics (0 when absent). */
  metric(name: string): Promise<number>;
  /** Waits until the client proxy's buffer holds nothing (at most `timeoutMs`). */
  emptied(timeoutMs?: number): Promise<void>;
}

export async function buffered(
  dir: string,
  apis: Record<string, DevApi>,
  buffer: Record<string, unknown>,
  o: {
    linkUp?: boolean;
    persistent?: boolean;
    timeouts?: Record<string, string>;
    users?: Record<string, string>;
    /** More lines of mosquitto's configuration. */
    broker?: string;
  } = {},
): Promise<Buffered> {
  const broker = await startBroker(dir, await freePort(), {
    ...(o.persistent ? { persistent: true } : {}),
    ...(o.users ? { users: o.users } : {}),
    ...(o.broker ? { extra: o.broker } : {}),
  });
  const [serverPort, port, metricsPort] = [await freePort(), await freePort(), await freePort()];
  const config = (as: string, listener: Record<string, unknown>, metricsAddr = "0") => ({
    spiffe: { workload_socket_path: apis[as]?.socket },
    metricsAddr,
    listeners: [{ name: "mqtt", protocol: "mqtt", ...listener }],
  });
  const linkUp = () =>
    startSvcProxy(
      config("api", {
        address: `127.0.0.1:${serverPort}`,
        mode: "server",
        target: { url: `mqtt://127.0.0.1:${broker.port}` },
      }),
    );
  if (o.linkUp !== false) await linkUp();
  const clientConfig = config(
    "web",
    {
      address: `127.0.0.1:${port}`,
      mode: "client",
      target: { url: `mqtts://127.0.0.1:${serverPort}` },
      middlewares: [{ type: "buffer", ...buffer }],
      ...(o.timeouts ? { timeouts: o.timeouts } : {}),
    },
    `127.0.0.1:${metricsPort}`,
  );
  // The metrics endpoint comes up after the listeners: wait for it too, so that metric() can be asked.
  const client = async () => {
    const p = await startSvcProxy(clientConfig);
    await waitForLog(p, "metrics");
    return p;
  };
  const b: Buffered = {
    port,
    metricsPort,
    client: await client(),
    broker,
    config: clientConfig,
    linkUp,
    async restart() {
      b.client = await client();
      return b.client;
    },
    metric: (name) => metricValue(metricsPort, name),
    emptied: (timeoutMs = 30_000) =>
      waitUntil(
        "the buffer empty",
        async () => (await b.metric('svc_proxy_mqtt_buffer_messages{listener="mqtt"}')) === 0,
        timeoutMs,
      ),
  };
  return b;
}
