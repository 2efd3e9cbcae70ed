import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BUN, type Proc, spawnProc } from "./proc.ts";

/** A temporary directory for one test file's sockets, CAs and logs. */
export function tempDir(prefix = "svc-test-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export interface DevApi {
  proc: Proc;
  socket: string;
}

/** Starts `svc dev workload-api` as its own process and waits until it serves. */
export async function startDevApi(o: {
  socketPath: string;
  spiffeIds: string[];
  caDir: string;
  ttl?: string;
  federate?: string[];
}): Promise<DevApi> {
  const args = [
    BUN,
    "cmd/svc.ts",
    "dev",
    "workload-api",
    "--socket",
    `unix://${o.socketPath}`,
    "--spiffe-id",
    o.spiffeIds.join(","),
    "--ca-dir",
    o.caDir,
    "--ttl",
    o.ttl ?? "1h",
  ];
  if (o.federate?.length) args.push("--federate", o.federate.join(","));
  const proc = spawnProc(args);
  await proc.waitFor((l) => l.includes('"socket"'));
  return { proc, socket: `unix://${o.socketPath}` };
}

/**
 * The notary tests' two workloads, one CA in `dir`/ca: a caller, prodId("web") at `dir`/web.sock, and a
 * pod workload (an ID of the pod form, which the notary states) at `dir`/llm.sock.
 */
export async function webAndPodApis(dir: string, podId: string): Promise<{ web: DevApi; pod: DevApi }> {
  const web = await startDevApi({
    socketPath: join(dir, "web.sock"),
    spiffeIds: [prodId("web")],
    caDir: join(dir, "ca"),
  });
  const pod = await startDevApi({
    socketPath: join(dir, "llm.sock"),
    spiffeIds: [podId],
    caDir: join(dir, "ca"),
  });
  return { web, pod };
}

/** The integration tests' workloads: service accounts of namespace prod in trust domain example.org. */
export const prodId = (sa: string) => `spiffe://example.org/ns/prod/sa/${sa}`;
/** The peer pattern that admits exactly prodId(sa). */
export const onlyProd = (sa: string) => [`^spiffe://example\\.org/ns/prod/sa/${sa}$`];

/**
 * One development Workload API per service account, sockets in `dir`, SVIDs from one CA in `dir`/ca.
 * The first creates the CA; the others start together.
 */
export async function startProdApis(dir: string, names: string[]): Promise<Record<string, DevApi>> {
  const start = (sa: string) =>
    startDevApi({ socketPath: join(dir, `${sa}.sock`), spiffeIds: [prodId(sa)], caDir: join(dir, "ca") });
  const [first, ...rest] = names;
  const apis: Record<string, DevApi> = {};
  if (first) apis[first] = await start(first);
  const others = await Promise.all(rest.map(start));
  rest.forEach((sa, i) => {
    apis[sa] = others[i] as DevApi;
  });
  return apis;
}

/**
 * TLS client options for a test caller with the SVID of `source`, trusting its bundle, without a hostname
 * check (the proxy's SPIFFE ID is not what these tests check).
 */
export function svidClientTls(source: import("../../lib/spiffe/x509-source.ts").X509Source) {
  const svid = source.getX509Svid();
  return {
    cert: svid.certPem,
    key: svid.keyPem,
    ca: source.bundles().pem(),
    checkServerIdentity: () => undefined,
  };
}
