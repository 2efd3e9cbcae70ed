import { beforeAll, describe, expect, test } from "bun:test";
import { DevCa, type IssueSpec } from "../../lib/dev/ca.ts";
import { BundleSet, X509Bundle } from "../../lib/spiffe/bundle.ts";
import { KeyUsage, parseCert } from "../../lib/spiffe/cert.ts";
import { parseX509Svid, verifyX509Svid } from "../../lib/spiffe/x509svid.ts";
import { svcError } from "../support/errors.ts";

let ca: DevCa;
let other: DevCa;
let bundles: BundleSet;
const ID = "spiffe://example.org/ns/default/sa/web";

beforeAll(async () => {
  ca = await DevCa.open("example.org");
  other = await DevCa.open("other.org");
  bundles = new BundleSet([
    new X509Bundle("example.org", [parseCert(ca.caDer)]),
    new X509Bundle("other.org", [parseCert(other.caDer)]),
  ]);
});

async function leaf(spec: Partial<IssueSpec> = {}, issuer = ca) {
  return issuer.issue({ uris: [ID], ttlMs: 60_000, ...spec });
}

describe("X.509-SVID verification of a peer", () => {
  test("a valid leaf verifies and yields its SPIFFE ID and the chain to the anchor", async () => {
    const l = await leaf();
    const peer = verifyX509Svid([l.certDer], bundles);
    expect(peer.id.uri).toBe(ID);
    expect(peer.chain.map((c) => c.subject)).toEqual(["O=SPIFFE", parseCert(ca.caDer).subject]);
  });

  test("a CA certificate as leaf is refused", async () => {
    const l = await leaf({ isCA: true });
    expect(svcError(() => verifyX509Svid([l.certDer], bundles))).toEqual({
      code: "invalid_svid",
      message: `invalid X.509-SVID: the leaf ${ID} is a CA certificate`,
    });
  });

  test("two URI SANs are refused", async () => {
    const l = await leaf({ uris: [ID, "spiffe://example.org/second"] });
    expect(svcError(() => verifyX509Svid([l.certDer], bundles)).message).toMatch(
      /has 2 URI SANs; exactly one/,
    );
  });

  test("no URI SAN is refused", async () => {
    const l = await leaf({ uris: [] });
    expect(svcError(() => verifyX509Svid([l.certDer], bundles)).message).toMatch(/has 0 URI SANs/);
  });

  test("a URI SAN that is not a SPIFFE ID is refused", async () => {
    const l = await leaf({ uris: ["https://example.org/web"] });
    expect(svcError(() => verifyX509Svid([l.certDer], bundles)).message).toMatch(/not a SPIFFE ID/);
  });

  test("a leaf with the trust domain's own ID (no path) is refused", async () => {
    const l = await leaf({ uris: ["spiffe://example.org"] });
    expect(svcError(() => verifyX509Svid([l.certDer], bundles)).message).toMatch(/has no path/);
  });

  test("a leaf claiming another trust domain is refused: it must chain to that domain's bundle", async () => {
    // Signed by example.org's CA but names other.org: other.org's bundle does not vouch for it.
    const l = await leaf({ uris: ["spiffe://other.org/impostor"] });
    expect(svcError(() => verifyX509Svid([l.certDer], bundles))).toEqual({
      code: "untrusted_peer",
      message: 'certificate of spiffe://other.org/impostor does not chain to the trust bundle of "other.org"',
    });
  });

  test("a trust domain without a bundle is refused", async () => {
    const third = await DevCa.open("third.org");
    const l = await leaf({ uris: ["spiffe://third.org/w"] }, third);
    expect(svcError(() => verifyX509Svid([l.certDer], bundles)).message).toMatch(
      /no trust bundle for trust domain "third.org"/,
    );
  });

  test("an expired SVID is refused", async () => {
    const l = await leaf({ notBefore: new Date(Date.now() - 3_600_000), ttlMs: 1000 });
    expect(svcError(() => verifyX509Svid([l.certDer], bundles)).message).toMatch(/expired at/);
  });

  test("an SVID that is not valid yet is refused", async () => {
    const l = await leaf({ notBefore: new Date(Date.now() + 3_600_000) });
    expect(svcError(() => verifyX509Svid([l.certDer], bundles)).message).toMatch(/not valid before/);
  });

  test.each([
    ["keyCertSign", KeyUsage.digitalSignature | KeyUsage.keyCertSign, /has the keyCertSign key usage/],
    ["cRLSign", KeyUsage.digitalSignature | KeyUsage.cRLSign, /has the cRLSign key usage/],
    ["no digitalSignature", KeyUsage.keyEncipherment, /lacks the digitalSignature key usage/],
  ])("a leaf with %s is refused", async (_, keyUsage, why) => {
    const l = await leaf({ keyUsage });
    expect(svcError(() => verifyX509Svid([l.certDer], bundles)).message).toMatch(why);
  });

  test("a chain through an intermediate CA verifies; an intermediate that is not a CA does not", async () => {
    const inter = await ca.issue({
      uris: ["spiffe://example.org"],
      ttlMs: 60_000,
      isCA: true,
      subject: "CN=intermediate",
    });
    const l = await leaf({ signer: { key: inter.key, subject: inter.subject } });
    expect(verifyX509Svid([l.certDer, inter.certDer], bundles).chain).toHaveLength(3);
    // Without the intermediate there is no path.
    expect(svcError(() => verifyX509Svid([l.certDer], bundles)).code).toBe("untrusted_peer");

    const notCa = await ca.issue({
      uris: [],
      ttlMs: 60_000,
      isCA: false,
      keyUsage: KeyUsage.keyCertSign,
      subject: "CN=not-a-ca",
    });
    const l2 = await leaf({ signer: { key: notCa.key, subject: notCa.subject } });
    expect(svcError(() => verifyX509Svid([l2.certDer, notCa.certDer], bundles)).message).toMatch(
      /"CN=not-a-ca" is not a CA/,
    );
  });

  test("a certificate from a different CA with a matching issuer name is refused by signature", async () => {
    const impostorCa = await DevCa.open("example.org"); // same name, different key
    const l = await leaf({}, impostorCa);
    expect(svcError(() => verifyX509Svid([l.certDer], bundles)).code).toBe("untrusted_peer");
  });
});

// DER building blocks for the extensions below.
const tlv = (tag: number, ...parts: Uint8Array[]) => {
  const body = Buffer.concat(parts);
  const len = body.length < 0x80 ? [body.length] : [0x81, body.length];
  return Uint8Array.from([tag, ...len, ...body]);
};
const ia5 = (tag: number, s: string) => tlv(tag, Buffer.from(s, "latin1"));
/** NameConstraints from GeneralName bases (URI [6], DNS [2], or any raw one). */
function nameConstraints(o: {
  readonly permitted?: readonly Uint8Array[];
  readonly excluded?: readonly Uint8Array[];
}) {
  const subtrees = (bases: readonly Uint8Array[]) => bases.map((b) => tlv(0x30, b));
  return tlv(
    0x30,
    ...(o.permitted ? [tlv(0xa0, ...subtrees(o.permitted))] : []),
    ...(o.excluded ? [tlv(0xa1, ...subtrees(o.excluded))] : []),
  );
}
const uri = (s: string) => ia5(0x86, s);
const dns = (s: string) => ia5(0x82, s);

describe("critical extensions and name constraints", () => {
  async function constrainedChain(value: Uint8Array, uris = [ID], critical = true) {
    const inter = await ca.issue({
      uris: [],
      ttlMs: 60_000,
      isCA: true,
      subject: "CN=constrained",
      extra: [{ oid: "2.5.29.30", critical, value }],
    });
    const l = await leaf({ uris, signer: { key: inter.key, subject: inter.subject } });
    return [l.certDer, inter.certDer];
  }

  test("an unknown critical extension is refused on the leaf, an intermediate and our own SVID", async () => {
    const odd = [{ oid: "1.3.6.1.4.1.99999.1", critical: true, value: Uint8Array.from([5, 0]) }];
    const l = await leaf({ extra: odd });
    expect(svcError(() => verifyX509Svid([l.certDer], bundles)).message).toBe(
      "invalid X.509-SVID: the leaf has a critical extension svc does not understand (1.3.6.1.4.1.99999.1)",
    );
    expect(() => parseX509Svid(l.certDer, l.keyDer)).toThrow(/critical extension svc does not understand/);
    // The same extension, not critical, is ignored as RFC 5280 allows.
    const fine = await leaf({ extra: [{ ...odd[0], critical: false } as (typeof odd)[0]] });
    expect(verifyX509Svid([fine.certDer], bundles).id.uri).toBe(ID);
    // Policy extensions are not processed, so a critical one is refused too.
    const inter = await ca.issue({
      uris: [],
      ttlMs: 60_000,
      isCA: true,
      subject: "CN=policy",
      extra: [
        {
          oid: "2.5.29.32",
          critical: true,
          value: tlv(0x30, tlv(0x30, tlv(0x06, Uint8Array.from([0x55, 0x1d, 0x20, 0])))),
        },
      ],
    });
    const below = await leaf({ signer: { key: inter.key, subject: inter.subject } });
    expect(svcError(() => verifyX509Svid([below.certDer, inter.certDer], bundles)).message).toMatch(
      /signing certificate "CN=policy" has a critical extension svc does not understand \(2\.5\.29\.32\)/,
    );
  });

  test.each([
    ["a permitted URI host", { permitted: [uri("example.org")] }, undefined],
    ["a permitted subdomain (leading period)", { permitted: [uri(".org")] }, undefined],
    [
      "an exact URI constraint on another host",
      { permitted: [uri("other.org")] },
      /is not permitted by .*other\.org/,
    ],
    [
      "a URI constraint without a period does not cover subdomains",
      { permitted: [uri("org")] },
      /not permitted/,
    ],
    [
      "an excluded URI host",
      { excluded: [uri("EXAMPLE.org")] },
      /is excluded by the name constraints of "CN=constrained" \(EXAMPLE\.org\)/,
    ],
    ["DNS constraints only (the leaf has no DNS names)", { permitted: [dns("example.com")] }, undefined],
    [
      "a directoryName constraint",
      { permitted: [tlv(0xa4, tlv(0x30))] },
      /kind svc does not check \(GeneralName tag 0xa4\)/,
    ],
    [
      "an IP constraint (the leaf has no IP names)",
      { excluded: [tlv(0x87, Uint8Array.from([10, 0, 0, 0, 255, 0, 0, 0]))] },
      undefined,
    ],
  ] as const)("name constraints: %s", async (_, nc, why) => {
    const chain = await constrainedChain(nameConstraints(nc));
    if (why) expect(svcError(() => verifyX509Svid(chain, bundles)).message).toMatch(why);
    else expect(verifyX509Svid(chain, bundles).id.uri).toBe(ID);
  });

  test("a host name with a trailing dot cannot slip past an exclusion", async () => {
    const chain = await constrainedChain(nameConstraints({ excluded: [uri("example.org")] }), [
      "spiffe://example.org./ns/default/sa/web",
    ]);
    // Only reachable when that spelling has a bundle of its own, signed by the same CA (a misconfiguration).
    const dotted = new BundleSet([new X509Bundle("example.org.", [parseCert(ca.caDer)])]);
    expect(svcError(() => verifyX509Svid(chain, dotted)).message).toMatch(
      /has a host name that cannot be matched against the name constraints/,
    );
  });

  test("name constraints of the trust anchor itself apply, and to our own SVID's intermediates", async () => {
    const chain = await constrainedChain(nameConstraints({ permitted: [uri("other.org")] }));
    const inter = chain[1] as Uint8Array;
    // Our own SVID handed over with the constrained intermediate.
    const own = await ca.issue({
      uris: [],
      ttlMs: 60_000,
      isCA: true,
      subject: "CN=constrained",
      extra: [
        { oid: "2.5.29.30", critical: true, value: nameConstraints({ permitted: [uri("other.org")] }) },
      ],
    });
    const mine = await leaf({ signer: { key: own.key, subject: own.subject } });
    expect(() => parseX509Svid(Buffer.concat([mine.certDer, own.certDer]), mine.keyDer)).toThrow(
      /not permitted by/,
    );
    // An anchor with constraints: the bundle holds the constrained CA itself.
    const anchored = new BundleSet([new X509Bundle("example.org", [parseCert(inter)])]);
    expect(svcError(() => verifyX509Svid([chain[0] as Uint8Array], anchored)).message).toMatch(
      /not permitted by/,
    );
  });
});

describe("our own X.509-SVID from the Workload API", () => {
  test("parses chain and key into PEM for TLS", async () => {
    const l = await leaf();
    const svid = parseX509Svid(l.certDer, l.keyDer, "internal");
    expect(svid.id.uri).toBe(ID);
    expect(svid.hint).toBe("internal");
    expect(svid.certPem).toStartWith("-----BEGIN CERTIFICATE-----");
    expect(svid.keyPem).toStartWith("-----BEGIN PRIVATE KEY-----");
  });

  test("a key that does not belong to the certificate is refused", async () => {
    const a = await leaf();
    const b = await leaf();
    expect(() => parseX509Svid(a.certDer, b.keyDer)).toThrow(/private key does not match the certificate/);
  });

  test("leaf rules apply to our own SVID too", async () => {
    const l = await leaf({ isCA: true });
    expect(() => parseX509Svid(l.certDer, l.keyDer)).toThrow(/is a CA certificate/);
  });
});
