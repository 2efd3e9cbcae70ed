import { homedir } from "node:os";
import { join } from "node:path";
import { defineCommand } from "citty";
import { parseDuration } from "../../lib/duration.ts";
import { SvcError } from "../../lib/errors.ts";
import { parseSpiffeId } from "../../lib/spiffe/id.ts";
import { loadReflectMetadata } from "../reflect.ts";
import { action, listFlag } from "./cli.ts";

const args = {
  socket: {
    type: "string",
    description: "Socket to serve on (unix:///path or a path)",
    default: "unix:///tmp/svc-dev/agent.sock",
  },
  "spiffe-id": {
    type: "string",
    description: "SPIFFE ID(s) to issue, comma-separated; the first is the default identity",
    required: true,
  },
  ttl: {
    type: "string",
    description: "X.509-SVID lifetime (Go duration); rotated at half of it",
    default: "1h",
  },
  "ca-dir": {
    type: "string",
    description:
      "Directory holding the trust domain's development CA (created if absent) [default: ~/.svc/dev-ca/<trust-domain>]",
  },
  federate: {
    type: "string",
    description:
      "Other development CA directories whose roots are handed out as federated bundles, comma-separated",
  },
} as const;

/** The root certificate of another development CA directory, for --federate. */
async function readDevCaRoot(dir: string): Promise<Uint8Array> {
  const { readFileSync } = await import("node:fs");
  const { pemToDer, parseCert } = await import("../../lib/spiffe/cert.ts");
  let pem: string;
  try {
    pem = readFileSync(join(dir, "ca.pem"), "utf8");
  } catch (e) {
    throw new SvcError(
      "usage",
      `--federate: cannot read ${join(dir, "ca.pem")} (${(e as NodeJS.ErrnoException).code}); pass a --ca-dir of another development Workload API`,
    );
  }
  const der = pemToDer(pem)[0];
  const uri = der ? parseCert(der).uriSans[0] : undefined;
  if (!der || !uri?.startsWith("spiffe://"))
    throw new SvcError("usage", `--federate: ${dir}/ca.pem is not a development CA`);
  return der;
}

const workloadApi = defineCommand({
  meta: {
    name: "workload-api",
    description:
      "Serve a development SPIFFE Workload API: short-lived SVIDs from a local CA, no attestation. DEVELOPMENT ONLY: any process that can open the socket gets the identities; use a SPIRE agent in production.",
  },
  args,
  run: action(args, async (a) => {
    const ids = listFlag(a["spiffe-id"]);
    if (ids.length === 0) throw new SvcError("usage", "--spiffe-id: at least one SPIFFE ID is required");
    const parsed = ids.map((id) => parseSpiffeId(id));
    const td = parsed[0]?.trustDomain as string;
    const other = parsed.find((p) => p.trustDomain !== td);
    if (other) {
      throw new SvcError(
        "usage",
        `--spiffe-id: ${other.uri} is not in trust domain ${td}; all IDs must share one`,
      );
    }
    let ttlMs: number;
    try {
      ttlMs = parseDuration(a.ttl);
    } catch (e) {
      throw new SvcError("usage", `--ttl: ${(e as Error).message}`);
    }
    if (ttlMs < 1000) throw new SvcError("usage", `--ttl: ${a.ttl} is too short (at least 1s)`);
    const { parseEndpoint, socketPath } = await import("../../lib/spiffe/address.ts");
    const path = socketPath(parseEndpoint(a.socket));
    if (!path) throw new SvcError("usage", `--socket: ${a.socket} is not a unix socket address`);
    await loadReflectMetadata();
    const { DevCa } = await import("../../lib/dev/ca.ts");
    const { DevWorkloadApi } = await import("../../lib/dev/workload-api.ts");
    const { parseCert } = await import("../../lib/spiffe/cert.ts");
    const federated = new Map<string, Uint8Array>();
    for (const dir of listFlag(a.federate)) {
      const der = await readDevCaRoot(dir);
      federated.set(parseSpiffeId(parseCert(der).uriSans[0] as string).trustDomain, der);
    }
    const ca = await DevCa.open(td, a["ca-dir"] || join(homedir(), ".svc", "dev-ca", td));
    const log = (m: string) => process.stderr.write(`${new Date().toISOString()} ${m}\n`);
    const spiffeIds = parsed.map((p) => p.uri);
    const api = await DevWorkloadApi.start({ socketPath: path, ca, spiffeIds, ttlMs, federated, log });
    log(`development Workload API for trust domain ${td} listening on unix://${path} (DEVELOPMENT ONLY)`);
    process.stdout.write(`${JSON.stringify({ socket: `unix://${path}`, trustDomain: td, spiffeIds })}\n`);
    const stop = async () => {
      await api.stop();
      process.exit(0);
    };
    process.on("SIGTERM", stop);
    process.on("SIGINT", stop);
    await new Promise(() => {});
  }),
});

export default defineCommand({
  meta: { name: "dev", description: "Development helpers (not for production)" },
  subCommands: { "workload-api": workloadApi },
});
