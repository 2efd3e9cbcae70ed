/** `make testbed-up` / `make testbed-down` / `make testbed-env`: the test bed from the shell. */
import { down, readTestbed, TESTBED_DIR, up } from "./index.ts";

const command = process.argv[2];
const log = (m: string) => process.stderr.write(`testbed: ${m}\n`);
try {
  if (command === "up") {
    const running = readTestbed();
    if (running) log(`already up (${TESTBED_DIR}); run make testbed-down first to restart`);
    const tb = running ?? (await up(TESTBED_DIR, log));
    process.stdout.write(
      `export KUBECONFIG=${tb.kube.kubeconfig}\nexport SPIFFE_ENDPOINT_SOCKET=unix://${tb.spire.agentSocket}\nexport SVC_TESTBED_MQTT=127.0.0.1:${tb.mosquitto.port}\n`,
    );
  } else if (command === "down") {
    const keep = process.argv.includes("--keep-logs");
    await down(undefined, keep);
    log(keep ? `down; logs kept in ${TESTBED_DIR}/logs` : "down");
  } else if (command === "status") {
    const tb = readTestbed();
    if (!tb) {
      log("not running");
      process.exit(1);
    }
    process.stdout.write(
      `${JSON.stringify({ dir: tb.dir, apiserver: tb.kube.apiserver, agentSocket: tb.spire.agentSocket, mqtt: tb.mosquitto.port })}\n`,
    );
  } else {
    process.stderr.write("usage: bun tests/e2e/testbed/cli.ts up|down [--keep-logs]|status\n");
    process.exit(2);
  }
} catch (e) {
  log((e as Error).message);
  process.exit(1);
}
