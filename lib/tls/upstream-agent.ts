/**
 * An https.Agent for SPIFFE mTLS to an upstream. BoringSSL checks the chain against every bundle we hold;
 * checkServerIdentity then applies the SPIFFE rules (the chain must lead to the bundle of the server's own
 * trust domain, no hostname check) and the authorizer. A refused server never receives the request.
 * The agent pools connections (keepAlive) and is replaced when the source rotates, so new connections
 * present the new SVID while requests on existing ones finish.
 */
import https from "node:https";
import { MIN_VERSION, type MtlsPolicy } from "./mtls.ts";
import { spiffeServerIdentity } from "./peer.ts";

export interface UpstreamAgent {
  agent(): https.Agent;
  /** How many replaced agents are still finishing requests (for tests and diagnostics). */
  retired(): number;
  close(): void;
}

const RETIRED_SWEEP_MS = 5_000;

export function createUpstreamAgent(policy: MtlsPolicy, o: { keepAlive: boolean }): UpstreamAgent {
  const build = () => {
    const svid = policy.source.getX509Svid();
    const agent = new https.Agent({
      keepAlive: o.keepAlive,
      cert: svid.certPem,
      key: svid.keyPem,
      ca: policy.source.bundles().pem(),
      minVersion: MIN_VERSION,
      checkServerIdentity: spiffeServerIdentity(policy.source, policy.authorize),
    });
    if (policy.keylog) agent.on("keylog", (line: Buffer) => policy.keylog?.write(line));
    return agent;
  };
  let current = build();
  const retired = new Set<https.Agent>();
  const inUse = (a: https.Agent) => Object.values(a.sockets).some((list) => (list?.length ?? 0) > 0);
  // A retired agent is destroyed, and forgotten, once its last in-flight request has finished.
  const sweep = setInterval(() => {
    for (const a of retired) {
      if (inUse(a)) continue;
      a.destroy();
      retired.delete(a);
    }
  }, RETIRED_SWEEP_MS);
  sweep.unref();
  const unsubscribe = policy.source.onUpdate(() => {
    const old = current;
    current = build();
    // Idle pooled sockets of the old agent are closed now; in-flight requests finish on theirs.
    retired.add(old);
    for (const list of Object.values(old.freeSockets)) for (const s of list ?? []) s.destroy();
  });
  return {
    agent: () => current,
    retired: () => retired.size,
    close() {
      unsubscribe();
      clearInterval(sweep);
      current.destroy();
      for (const a of retired) a.destroy();
    },
  };
}
