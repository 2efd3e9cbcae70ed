import http2 from "node:http2";
import type { MtlsPolicy } from "./mtls.ts";
import { spiffeServerIdentity } from "./peer.ts";

/**
 * HTTP/2 client sessions to one target, one at a time, multiplexing every stream: h2c for http://, ALPN
 * h2 over TLS for https://, and SPIFFE mTLS (our SVID, the peer's chain verified against the bundles and
 * `authorize`) when a policy is given. A session that closes, fails or receives GOAWAY is replaced on the
 * next request. After an SVID rotation the current session is closed gracefully: its streams finish, new
 * ones go over a new handshake with the new SVID. A session not connected within `connectTimeoutMs` fails.
 */
export interface H2Sessions {
  session(): http2.ClientHttp2Session;
  close(): void;
}

export function createH2Sessions(target: URL, connectTimeoutMs: number, policy?: MtlsPolicy): H2Sessions {
  let current: http2.ClientHttp2Session | undefined;
  const open = (): http2.ClientHttp2Session => {
    let options: http2.SecureClientSessionOptions = {};
    if (policy) {
      const svid = policy.source.getX509Svid();
      options = {
        cert: svid.certPem,
        key: svid.keyPem,
        ca: policy.source.bundles().pem(),
        minVersion: "TLSv1.2",
        ALPNProtocols: ["h2"],
        checkServerIdentity: spiffeServerIdentity(policy.source, policy.authorize),
      };
    }
    const s = http2.connect(target.origin, options);
    // A target that takes the connection but never completes it (TCP, TLS or HTTP/2 settings) would hold
    // every request made meanwhile: the session fails, and so do they, after connectTimeoutMs.
    const timer = setTimeout(
      () => s.destroy(new Error(`no HTTP/2 connection to ${target.origin} within ${connectTimeoutMs} ms`)),
      connectTimeoutMs,
    );
    s.once("connect", () => clearTimeout(timer));
    const forget = () => {
      clearTimeout(timer);
      if (current === s) current = undefined;
    };
    s.once("close", forget);
    s.once("goaway", forget);
    // A failed session fails its streams, which answer their callers; the listener goes on.
    s.on("error", forget);
    if (policy?.keylog) s.socket?.on("keylog", (line: Buffer) => policy.keylog?.write(line));
    return s;
  };
  const unsubscribe = policy?.source.onUpdate(() => {
    const old = current;
    current = undefined;
    old?.close();
  });
  return {
    session() {
      if (!current || current.closed || current.destroyed) current = open();
      return current;
    },
    close() {
      unsubscribe?.();
      current?.close();
      current = undefined;
    },
  };
}
