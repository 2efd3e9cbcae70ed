/**
 * The full path's hop to the target: SPIFFE mTLS (client and central modes) or not; HTTP/2 sessions
 * (connection.http2) or HTTP/1.1 agents. `forward` sends a request on and returns the target's response,
 * with who answered when the hop is mTLS.
 */
import type { EventEmitter } from "node:events";
import http from "node:http";
import https from "node:https";
import { checkServerIdentity, type TLSSocket } from "node:tls";
import { createH2Sessions, type H2Sessions } from "../../../lib/tls/h2-sessions.ts";
import { presentedChain } from "../../../lib/tls/peer.ts";
import { createUpstreamAgent } from "../../../lib/tls/upstream-agent.ts";
import { verifyPeerChain } from "../../../lib/tls/verified-chains.ts";
import { socketHost } from "../../../lib/url-host.ts";
import type { ListenerConfig } from "../../config/types.ts";
import { type ListenerDeps, targetAuthorizer } from "../../listener.ts";
import type { Handler, ProxyRequest, Upstream } from "../types.ts";
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
    // One connection to the target per caller connection, as ghostunnel has: a caller that holds as many
    // streams open as the target allows on one connection takes only its own, never another caller's.
    const perCaller = new WeakMap<object, H2Sessions>();
    const all = new Set<H2Sessions>();
    const session = (req: ProxyRequest) => {
      let h2 = perCaller.get(req.connection);
      if (!h2) {
        const made = createH2Sessions(l.target, l.timeouts.handshakeMs, targetPolicy);
        perCaller.set(req.connection, made);
        all.add(made);
        (req.connection as EventEmitter).once("close", () => {
          made.close();
          all.delete(made);
        });
        h2 = made;
      }
      return h2.session();
    };
    forward = h2Forwarder({ target: l.target, session, ...(targetPolicy ? { identify } : {}) });
    closeTarget = () => {
      for (const h2 of all) h2.close();
      all.clear();
    };
  } else {
    const upstream = targetPolicy
      ? createUpstreamAgent(targetPolicy, { keepAlive: !l.disableKeepalive })
      : undefined;
    // An ordinary https:// target's certificate must name the configured host, never the caller's Host
    // header (Node takes the name to check from it when the target is an IP address).
    const targetHost = socketHost(l.target.hostname);
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
