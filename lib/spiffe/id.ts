/**
 * SPIFFE ID parsing to the SPIFFE ID standard (spiffe/spiffe standards/SPIFFE-ID.md section 2):
 * scheme `spiffe`, a lower-case trust domain of [a-z0-9.-_], no userinfo, port, query or fragment,
 * path segments of [a-zA-Z0-9.-_] that are neither empty, `.` nor `..`, no trailing slash, no
 * percent-encoding, at most 2048 bytes in all and 255 bytes of trust domain.
 */
import { SvcError } from "../errors.ts";

export interface SpiffeId {
  readonly trustDomain: string;
  /** "" for the trust domain's own ID, otherwise starts with "/". */
  readonly path: string;
  /** The canonical form: `spiffe://<trustDomain><path>`. */
  readonly uri: string;
}

const MAX_ID_BYTES = 2048;
const MAX_TRUST_DOMAIN_BYTES = 255;

const SCHEME = "spiffe://";
const TRUST_DOMAIN_CHAR = /^[a-z0-9._-]$/;
const PATH_SEGMENT = /^[A-Za-z0-9._-]+$/;

function invalid(input: string, why: string): SvcError {
  return new SvcError("invalid_spiffe_id", `invalid SPIFFE ID ${JSON.stringify(input)}: ${why}`);
}

/** Validates a trust domain name (without scheme); returns it or throws naming the fault. */
export function parseTrustDomain(name: string): string {
  const input = name.startsWith(SCHEME) ? name.slice(SCHEME.length) : name;
  if (input === "") throw invalid(name, "the trust domain is empty");
  if (Buffer.byteLength(input) > MAX_TRUST_DOMAIN_BYTES) {
    throw invalid(name, `the trust domain is longer than ${MAX_TRUST_DOMAIN_BYTES} bytes`);
  }
  for (const ch of input) {
    if (TRUST_DOMAIN_CHAR.test(ch)) continue;
    if (ch === ":") throw invalid(name, "a port is not allowed in the trust domain");
    if (ch === "@") throw invalid(name, "userinfo is not allowed in the trust domain");
    if (ch === "%") throw invalid(name, "percent-encoding is not allowed");
    if (/[A-Z]/.test(ch)) throw invalid(name, "the trust domain must be lower case");
    throw invalid(
      name,
      `character ${JSON.stringify(ch)} is not allowed in the trust domain (allowed: a-z 0-9 . - _)`,
    );
  }
  return input;
}

/** Validates a path ("" or "/seg/seg"); returns it or throws naming the fault. */
function parsePath(path: string, whole = path): string {
  if (path === "") return path;
  if (!path.startsWith("/")) throw invalid(whole, "the path must start with /");
  const segments = path.slice(1).split("/");
  for (const segment of segments) {
    if (segment === "") {
      throw invalid(
        whole,
        path.endsWith("/") ? "a trailing / is not allowed" : "empty path segments are not allowed",
      );
    }
    if (segment === "." || segment === "..")
      throw invalid(whole, `the path segment ${segment} is not allowed`);
    if (!PATH_SEGMENT.test(segment)) {
      const bad = [...segment].find((c) => !/[A-Za-z0-9._-]/.test(c)) ?? "";
      if (bad === "%") throw invalid(whole, "percent-encoding is not allowed");
      throw invalid(
        whole,
        `character ${JSON.stringify(bad)} is not allowed in a path segment (allowed: A-Z a-z 0-9 . - _)`,
      );
    }
  }
  return path;
}

export function parseSpiffeId(input: string): SpiffeId {
  if (typeof input !== "string" || input === "") throw invalid(String(input), "it is empty");
  if (Buffer.byteLength(input) > MAX_ID_BYTES)
    throw invalid(`${input.slice(0, 40)}…`, `longer than ${MAX_ID_BYTES} bytes`);
  // The scheme and the trust domain are lower case (the standard's sections 2.1 and 2.2), as go-spiffe holds
  // them; folding `SPIFFE://EXAMPLE.ORG` would let two spellings name one workload.
  if (!input.startsWith(SCHEME)) {
    throw invalid(
      input,
      input.slice(0, SCHEME.length).toLowerCase() === SCHEME
        ? "the scheme must be spiffe:// in lower case"
        : "the scheme must be spiffe://",
    );
  }
  const rest = input.slice(SCHEME.length);
  if (rest.includes("?")) throw invalid(input, "a query is not allowed");
  if (rest.includes("#")) throw invalid(input, "a fragment is not allowed");
  const slash = rest.indexOf("/");
  const authority = slash < 0 ? rest : rest.slice(0, slash);
  const path = slash < 0 ? "" : rest.slice(slash);
  if (authority === "") throw invalid(input, "the trust domain is empty");
  const trustDomain = parseTrustDomain(authority);
  parsePath(path, input);
  return { trustDomain, path, uri: `${SCHEME}${trustDomain}${path}` };
}

/** Parts of the pod form `spiffe://<td>/ns/<namespace>/sa/<service_account>/pod/<pod_name>/<pod_uid>`. */
export interface PodIdentity {
  trustDomain: string;
  namespace: string;
  serviceAccount: string;
  podName: string;
  podUid: string;
}

export function podIdentity(id: SpiffeId): PodIdentity | undefined {
  const s = id.path.split("/");
  if (s.length !== 8 || s[1] !== "ns" || s[3] !== "sa" || s[5] !== "pod") return undefined;
  const [, , namespace, , serviceAccount, , podName, podUid] = s as [
    string,
    string,
    string,
    string,
    string,
    string,
    string,
    string,
  ];
  return { trustDomain: id.trustDomain, namespace, serviceAccount, podName, podUid };
}
