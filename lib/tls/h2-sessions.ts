/**
 * HTTP/2 client sessions to one target, one at a time, multiplexing every stream: h2c for http://, ALPN
 * h2 over TLS for https://, and SPIFFE mTLS (our SVID, the peer's chain verified against the bundles and
 * `authorize`) when a policy is given. A session that closes, fails or receives GOAWAY is replaced on the
 * next request. After an SVID rotation the current session is closed gracefully: its streams finish, new
 * ones go over a new handshake with the new SVID. A session not connected within `connectTimeoutMs` fails.
 */
import http2 from "node:http2";
import { followBunTls } from "./bun-peer.ts";
import { MIN_VERSION, type MtlsPolicy } from "./mtls.ts";
import { spiffeServerIdentity } from "./peer.ts";

export interface H2Sessions {
  session(): http2.ClientHttp2Session;
  close(): void;
}

export function createH2Sessions(target: URL, connectTimeoutMs: number, policy?: MtlsPolicy): H2Sessions {
  let current: http2.ClientHttp2Session | undefined;
  // Our SVID and the bundles, read again on each update; the update closes the current session.
  const tls =
    policy &&
    followBunTls<http2.SecureClientSessionOptions>(
      policy.source,
      {
        minVersion: MIN_VERSION,
        ALPNProtocols: ["h2"],
        checkServerIdentity: spiffeServerIdentity(policy.source, policy.authorize),
      },
      () => {
        const old = current;
        current = undefined;
        old?.close();
      },
    );
  const open = (): http2.ClientHttp2Session => {
    const s = http2.connect(target.origin, tls?.current() ?? {});
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
  return {
    session() {
      if (!current || current.closed || current.destroyed) current = open();
      return current;
    },
    close() {
      tls?.close();
      current?.close();
      current = undefined;
    },
  };
}
