import { beforeAll, describe, expect, test } from "bun:test";
import { BundleSet, X509Bundle } from "../../lib/spiffe/bundle.ts";
import { KeyUsage, parseCert } from "../../lib/spiffe/cert.ts";
import { DevCa, type IssueSpec } from "../../lib/spiffe/dev-ca.ts";
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
