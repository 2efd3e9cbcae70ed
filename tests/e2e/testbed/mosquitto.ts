import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { waitForPort } from "../../support/net.ts";
import { freePort, startDaemon } from "./process.ts";

/** Debian's mosquitto on a loopback port, anonymous, no persistence. */
export interface MosquittoState {
  port: number;
  pid: number;
}

export async function startMosquitto(dir: string, logs: string): Promise<MosquittoState> {
  const port = await freePort();
  const conf = join(dir, "mosquitto.conf");
  writeFileSync(
    conf,
    `listener ${port} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest stdout\n`,
  );
  const pid = startDaemon("mosquitto", ["-c", conf], join(logs, "mosquitto.log"));
  await waitForPort(port, 20_000);
  return { port, pid };
}
