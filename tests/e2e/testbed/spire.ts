import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import { waitUntil } from "../../support/wait.ts";
import { NODE } from "./kube.ts";
import type { Peers } from "./peers.ts";
import { freePort, run, startDaemon } from "./process.ts";

/**
 * SPIRE server and agent on loopback: join-token node attestation, the unix workload attestor, and one
 * registration entry per test workload. A workload is a unix uid (processes run under it with setpriv)
 * whose pod exists in the apiserver, so its SVID carries the pod form
 * spiffe://<td>/ns/<ns>/sa/<sa>/pod/<pod>/<pod uid>.
 */
export const TRUST_DOMAIN = "svc.test";
const AGENT_ID = `spiffe://${TRUST_DOMAIN}/testbed/agent`;
/** Workload SVIDs live this long, so that the agent rotates them (at about half) inside a test. */
export const WORKLOAD_SVID_TTL_SECONDS = 30;

export interface Workload {
  name: string;
  uid: number;
  namespace: string;
  serviceAccount: string;
  pod: string;
  podUid: string;
  spiffeId: string;
}

export interface SpireState {
  serverSocket: string;
  agentSocket: string;
  bundleFile: string;
  workloads: Record<string, Workload>;
  pids: Record<string, number>;
}

export const WORKLOADS: Omit<Workload, "podUid" | "spiffeId">[] = [
  { name: "web", uid: 20001, namespace: "alpha", serviceAccount: "web", pod: "web-0" },
  { name: "api", uid: 20002, namespace: "alpha", serviceAccount: "api", pod: "api-0" },
  { name: "intruder", uid: 20003, namespace: "bravo", serviceAccount: "intruder", pod: "intruder-0" },
  // Registered under a pod UID that is not its pod's (as after a pod was replaced): the notary must refuse it.
  { name: "stale", uid: 20004, namespace: "alpha", serviceAccount: "stale", pod: "stale-0" },
];

/** The pod UID the stale workload's SPIFFE ID names. */
export const STALE_POD_UID = "00000000-0000-4000-8000-00000000dead";

export async function startSpire(
  p: Peers,
  dir: string,
  logs: string,
  kubectl: (args: string[], input?: string) => string,
): Promise<SpireState> {
  const port = await freePort();
  const serverSocket = join(dir, "spire-server", "api.sock");
  // The agent socket's directory must be reachable by the workload uids.
  const agentDir = join(dir, "agent");
  mkdirSync(join(dir, "spire-server"), { recursive: true });
  mkdirSync(agentDir, { recursive: true });
  chmodSync(agentDir, 0o755);
  const agentSocket = join(agentDir, "agent.sock");
  const serverConf = join(dir, "spire-server.conf");
  writeFileSync(
    serverConf,
    `server {
  bind_address = "127.0.0.1"
  bind_port = "${port}"
  socket_path = "${serverSocket}"
  trust_domain = "${TRUST_DOMAIN}"
  data_dir = "${join(dir, "spire-server")}"
  log_level = "INFO"
  ca_ttl = "24h"
  default_x509_svid_ttl = "1h"
  default_jwt_svid_ttl = "5m"
}
plugins {
  DataStore "sql" { plugin_data { database_type = "sqlite3" connection_string = "${join(dir, "spire-server", "datastore.sqlite3")}" } }
  NodeAttestor "join_token" { plugin_data {} }
  KeyManager "memory" { plugin_data {} }
}
`,
  );
  const pids: Record<string, number> = {};
  pids.spireServer = startDaemon(
    p.spireServer,
    ["run", "-config", serverConf],
    join(logs, "spire-server.log"),
  );
  const server = (args: string[]) => run([p.spireServer, ...args, "-socketPath", serverSocket]);
  await waitUntil("spire-server", () => server(["healthcheck"]).includes("healthy"), 60_000);

  const bundleFile = join(dir, "bundle.pem");
  writeFileSync(bundleFile, server(["bundle", "show"]));
  const joinToken = /Token: (\S+)/.exec(
    server(["token", "generate", "-spiffeID", AGENT_ID, "-ttl", "600"]),
  )?.[1];
  if (!joinToken) throw new Error("spire-server token generate printed no token");
  const agentConf = join(dir, "spire-agent.conf");
  writeFileSync(
    agentConf,
    `agent {
  data_dir = "${join(dir, "spire-agent")}"
  log_level = "INFO"
  server_address = "127.0.0.1"
  server_port = "${port}"
  socket_path = "${agentSocket}"
  trust_bundle_path = "${bundleFile}"
  trust_domain = "${TRUST_DOMAIN}"
}
plugins {
  NodeAttestor "join_token" { plugin_data {} }
  KeyManager "memory" { plugin_data {} }
  WorkloadAttestor "unix" { plugin_data {} }
}
`,
  );
  pids.spireAgent = startDaemon(
    p.spireAgent,
    ["run", "-config", agentConf, "-joinToken", joinToken],
    join(logs, "spire-agent.log"),
  );
  await waitUntil(
    "spire-agent",
    () => run([p.spireAgent, "healthcheck", "-socketPath", agentSocket]).includes("healthy"),
    60_000,
  );

  const workloads: Record<string, Workload> = {};
  for (const w of WORKLOADS) {
    kubectl(
      ["apply", "-f", "-"],
      [
        stringify({
          apiVersion: "v1",
          kind: "ServiceAccount",
          metadata: { name: w.serviceAccount, namespace: w.namespace },
        }),
        stringify({
          apiVersion: "v1",
          kind: "Pod",
          metadata: {
            name: w.pod,
            namespace: w.namespace,
            labels: { app: w.name },
            // The MLS annotations (docs/svc-config.md) for the namespace's compartment (alpha US-TS, bravo UK-S).
            annotations:
              w.namespace === "bravo"
                ? { "mls.svc.dev/compartment": "uk:bravo", "mls.svc.dev/level": "uk:s" }
                : { "mls.svc.dev/compartment": `us:${w.namespace}`, "mls.svc.dev/level": "us:ts" },
          },
          spec: {
            serviceAccountName: w.serviceAccount,
            nodeName: NODE,
            containers: [{ name: w.name, image: `registry.svc.test/${w.name}:1.0` }],
          },
        }),
      ].join("---\n"),
    );
    const podUid =
      w.name === "stale"
        ? STALE_POD_UID
        : kubectl(["get", "pod", w.pod, "-n", w.namespace, "-o", "jsonpath={.metadata.uid}"]).trim();
    const spiffeId = `spiffe://${TRUST_DOMAIN}/ns/${w.namespace}/sa/${w.serviceAccount}/pod/${w.pod}/${podUid}`;
    server([
      "entry",
      "create",
      "-parentID",
      AGENT_ID,
      "-spiffeID",
      spiffeId,
      "-selector",
      `unix:uid:${w.uid}`,
      "-x509SVIDTTL",
      String(WORKLOAD_SVID_TTL_SECONDS),
    ]);
    workloads[w.name] = { ...w, podUid, spiffeId };
  }
  // The agent picks new entries up on its next sync: ready means every workload can fetch its SVID.
  for (const w of Object.values(workloads)) {
    await waitUntil(
      `SVID for ${w.name}`,
      () =>
        run(asWorkload(w, [p.spireAgent, "api", "fetch", "x509", "-socketPath", agentSocket])).includes(
          w.spiffeId,
        ),
      60_000,
    );
  }
  return { serverSocket, agentSocket, bundleFile, workloads, pids };
}

/** The command line that runs `cmd` as a workload's unix uid (what the unix attestor sees). */
export function asWorkload(w: Workload, cmd: string[]): string[] {
  return ["setpriv", `--reuid=${w.uid}`, `--regid=${w.uid}`, "--clear-groups", "--", ...cmd];
}
