import { type Cert, derToPem, parseCert, splitDer } from "./cert.ts";
import { parseTrustDomain } from "./id.ts";

/** The X.509 authorities of one trust domain. */
export class X509Bundle {
  readonly trustDomain: string;
  constructor(
    trustDomain: string,
    readonly authorities: readonly Cert[],
  ) {
    this.trustDomain = parseTrustDomain(trustDomain);
  }

  static fromDer(trustDomain: string, concatenated: Uint8Array): X509Bundle {
    return new X509Bundle(trustDomain, splitDer(concatenated).map(parseCert));
  }

  pem(): string {
    return this.authorities.map((a) => derToPem(a.der)).join("");
  }
}

/** Where verification finds the bundle for a peer's trust domain. */
export interface BundleSource {
  getX509Bundle(trustDomain: string): X509Bundle | undefined;
}

/** Bundles by trust domain: our own and any federated ones. Immutable; a new set replaces an old one. */
export class BundleSet implements BundleSource {
  private readonly byDomain: ReadonlyMap<string, X509Bundle>;
  constructor(bundles: Iterable<X509Bundle>) {
    this.byDomain = new Map([...bundles].map((b) => [b.trustDomain, b]));
  }
  getX509Bundle(trustDomain: string): X509Bundle | undefined {
    return this.byDomain.get(trustDomain);
  }
  trustDomains(): string[] {
    return [...this.byDomain.keys()];
  }
  /** All authorities as PEM, for TLS stacks that want a `ca` list. */
  pem(): string {
    return [...this.byDomain.values()].map((b) => b.pem()).join("");
  }
}
