/**
 * The full path's hop to the target: SPIFFE mTLS (client and central modes) or not; HTTP/2 sessions
 * (connection.http2) or HTTP/1.1 agents. `forward` sends a request on and returns the target's response,
 * with who answered when the hop is mTLS.
 */
import http from "node:http";
import https from "node:https";
import { checkServerIdentity, type TLSSocket } from "node:tls";
import { createH2Sessions } from "../../../lib/tls/h2-sessions.ts";
import { presentedChain } from "../../../lib/tls/peer.ts";
import { createUpstreamAgent } from "../../../lib/tls/upstream-agent.ts";
import { verifyPeerChain } from "../../../lib/tls/verified-chains.ts";
import type { ListenerConfig } from "../../config/types.ts";
import { type ListenerDeps, targetAuthorizer } from "../../listener.ts";
import type { Handler, Upstream } from "../types.ts";
import { forwarder } from "./forward.ts";
import { h2Forwarder } from "./forward-h2.ts";

export function openTarget(l: ListenerConfig, deps: ListenerDeps): { forward: Handler; close(): void } {
  const targetPolicy = l.targetMtls
    ? {
        source: deps.source,
        authorize: targetAuthorizer(l),
        ...(deps.keylog ? { keylog: deps.keylog } : {}),
      }
    : undefined;
  // Who answered on an mTLS upstream connection, verified once per connection.
  const upstreams = new WeakMap<TLSSocket, Upstream>();
  const identify = (socket: TLSSocket) => {
    let u = upstreams.get(socket);
    if (!u) {
      const chain = presentedChain(socket);
      // checkServerIdentity verified this chain moments ago: this is answered from memory.
      u = { id: verifyPeerChain(chain, deps.source).id, chain };
      upstreams.set(socket, u);
    }
    return u;
  };
  let closeTarget: () => void;
  let forward: Handler;
  if (l.http2) {
    const h2 = createH2Sessions(l.target, l.timeouts.handshakeMs, targetPolicy);
    forward = h2Forwarder({ target: l.target, session: h2.session, ...(targetPolicy ? { identify } : {}) });
    closeTarget = () => h2.close();
  } else {
    const upstream = targetPolicy
      ? createUpstreamAgent(targetPolicy, { keepAlive: !l.disableKeepalive })
      : undefined;
    // An ordinary https:// target's certificate must name the configured host, never the caller's Host
    // header (Node takes the name to check from it when the target is an IP address).
    const targetHost = l.target.hostname.replace(/^\[|\]$/g, "");
    const plainAgent =
      l.target.protocol === "https:"
        ? new https.Agent({
            keepAlive: !l.disableKeepalive,
            checkServerIdentity: (_name, cert) => checkServerIdentity(targetHost, cert),
          })
        : new http.Agent({ keepAlive: !l.disableKeepalive });
    const agent = () => upstream?.agent() ?? plainAgent;
    forward = forwarder({ target: l.target, agent, ...(targetPolicy ? { identify } : {}) });
    closeTarget = () => {
      upstream?.close();
      plainAgent.destroy();
    };
  }
  return { forward, close: closeTarget };
}
