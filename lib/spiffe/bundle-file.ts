import { readFileSync } from "node:fs";
import { SvcError } from "../errors.ts";
import { type BundleSource, X509Bundle } from "./bundle.ts";
import { type Cert, parseCert, pemToDer } from "./cert.ts";
import { parseSpiffeId } from "./id.ts";

/**
 * A trust bundle read from a file for offline verification: PEM certificates (`spire-server bundle show`)
 * or a SPIFFE bundle document (JWKS with x509-svid keys, `-format spiffe`). Authorities that carry a
 * SPIFFE ID name their trust domain and are used only for it; others are used for any trust domain,
 * since a plain PEM file does not say which one it is for.
 */
export function loadBundleFile(path: string): BundleSource {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new SvcError("usage", `--bundle ${path}: cannot read it (${(e as NodeJS.ErrnoException).code})`);
  }
  let certs: Cert[];
  try {
    certs = text.trim().startsWith("{") ? fromJwks(text) : pemToDer(text).map(parseCert);
  } catch (e) {
    throw new SvcError("usage", `--bundle ${path}: not a PEM or SPIFFE bundle: ${(e as Error).message}`);
  }
  if (certs.length === 0)
    throw new SvcError("usage", `--bundle ${path}: holds no certificate (expected PEM or a SPIFFE bundle)`);
  const domainOf = (c: Cert) => {
    const uri = c.uriSans.find((u) => u.startsWith("spiffe://"));
    try {
      return uri ? parseSpiffeId(uri).trustDomain : undefined;
    } catch {
      return undefined;
    }
  };
  return {
    getX509Bundle(trustDomain: string) {
      const authorities = certs.filter((c) => (domainOf(c) ?? trustDomain) === trustDomain);
      return authorities.length ? new X509Bundle(trustDomain, authorities) : undefined;
    },
  };
}

function fromJwks(text: string): Cert[] {
  const doc = JSON.parse(text) as { keys?: { use?: string; x5c?: string[] }[] };
  return (doc.keys ?? [])
    .filter((k) => k.use === "x509-svid" && k.x5c?.[0])
    .map((k) => parseCert(new Uint8Array(Buffer.from(k.x5c?.[0] as string, "base64"))));
}
