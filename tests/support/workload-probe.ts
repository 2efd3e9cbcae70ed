/**
 * Run as a workload against a real Workload API: prints (one JSON line each) its X.509-SVID, a JWT-SVID
 * validated locally and by the agent, then the next rotation seen (or a timeout).
 */

import { resolveEndpoint } from "../../lib/spiffe/address.ts";
import { JwtBundleSet, validateJwtSvid } from "../../lib/spiffe/jwt.ts";
import { WorkloadApiClient } from "../../lib/spiffe/workload-client.ts";
import { X509Source } from "../../lib/spiffe/x509-source.ts";

const out = (v: unknown) => process.stdout.write(`${JSON.stringify(v)}\n`);
const waitMs = Number(process.argv[2] ?? "60000");
const source = await X509Source.open({ timeoutMs: 60_000 });
const svid = source.getX509Svid();
out({
  svid: svid.id.uri,
  serial: svid.chain[0]?.native.serialNumber,
  notAfter: svid.notAfter.toISOString(),
  bundles: source.bundles().trustDomains(),
});

const client = new WorkloadApiClient(resolveEndpoint());
const [jwt] = await client.fetchJwtSvids(["svc-e2e"]);
const local = await validateJwtSvid(
  jwt?.svid as string,
  "svc-e2e",
  JwtBundleSet.fromWorkloadApi((await client.fetchJwtBundles()).bundles),
);
const remote = await client.validateJwtSvid(jwt?.svid as string, "svc-e2e");
out({ jwt: jwt?.spiffeId, local: local.id.uri, remote: remote.spiffeId, aud: remote.claims.aud });
client.close();

const rotated = await new Promise<boolean>((resolve) => {
  const timer = setTimeout(() => resolve(false), waitMs);
  source.onUpdate(() => {
    clearTimeout(timer);
    resolve(true);
  });
});
const next = source.getX509Svid();
out({ rotated, serial: next.chain[0]?.native.serialNumber, notAfter: next.notAfter.toISOString() });
source.close();
process.exit(0);
