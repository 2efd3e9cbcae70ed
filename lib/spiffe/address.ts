/**
 * Workload API endpoint addresses (SPIFFE Workload Endpoint section 4): `unix:///abs/path`, also
 * `unix:/abs/path` and a bare absolute path, or `tcp://<ip>:<port>`. When none is given the conventional
 * SPIFFE_ENDPOINT_SOCKET applies. Returns the gRPC target.
 */
import { isAbsolute } from "node:path";
import { SvcError } from "../errors.ts";

export const ENDPOINT_ENV = "SPIFFE_ENDPOINT_SOCKET";

function bad(address: string, why: string): SvcError {
  return new SvcError(
    "invalid_address",
    `invalid Workload API address ${JSON.stringify(address)}: ${why} (allowed: unix:///absolute/path or tcp://<ip>:<port>)`,
  );
}

export function resolveEndpoint(
  address?: string,
  env: Record<string, string | undefined> = process.env,
): string {
  const value = address || env[ENDPOINT_ENV];
  if (!value) {
    throw new SvcError(
      "invalid_address",
      `no Workload API address: pass one or set ${ENDPOINT_ENV}=unix:///path/to/agent.sock`,
    );
  }
  return parseEndpoint(value);
}

export function parseEndpoint(address: string): string {
  if (isAbsolute(address)) return `unix://${address}`;
  if (address.startsWith("unix:")) {
    const rest = address.slice("unix:".length);
    let path: string;
    if (rest.startsWith("//")) {
      const afterAuthority = rest.slice(2);
      if (!afterAuthority.startsWith("/")) throw bad(address, "a unix address must not have a host part");
      path = afterAuthority;
    } else path = rest;
    if (!path.startsWith("/") || path === "/") throw bad(address, "the socket path must be absolute");
    if (/[?#]/.test(path)) throw bad(address, "a query or fragment is not allowed");
    return `unix://${path}`;
  }
  if (address.startsWith("tcp://")) {
    const hostPort = address.slice("tcp://".length);
    const m = /^(\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]):(\d{1,5})$/.exec(hostPort);
    if (!m) throw bad(address, "a tcp address must be an IP and a port with nothing after it");
    return `${m[1]}:${m[2]}`;
  }
  throw bad(address, "unknown scheme");
}

/** The filesystem path of a unix endpoint, for error messages and socket checks. */
export function socketPath(target: string): string | undefined {
  return target.startsWith("unix://") ? target.slice("unix://".length) : undefined;
}
