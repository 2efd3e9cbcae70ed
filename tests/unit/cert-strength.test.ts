import "reflect-metadata";
import { beforeAll, describe, expect, test } from "bun:test";
import { KeyObject, sign } from "node:crypto";
import { AsnConvert } from "@peculiar/asn1-schema";
import { AlgorithmIdentifier, Certificate } from "@peculiar/asn1-x509";
import * as x509 from "@peculiar/x509";
import { DevCa } from "../../lib/dev/ca.ts";
import { BundleSet, X509Bundle } from "../../lib/spiffe/bundle.ts";
import { parseCert } from "../../lib/spiffe/cert.ts";
import { parseX509Svid, verifyX509Svid } from "../../lib/spiffe/x509svid.ts";
import { ia5, seq } from "../support/der-build.ts";
import { svcError } from "../support/errors.ts";

/**
 * Key and signature strength (as `openssl verify -auth_level 2` holds them): RSA keys under 2048 bits and
 * MD5 or SHA-1 signatures are refused on every certificate of a peer's chain, the trust anchor included,
 * naming the certificate and the reason. And an empty subject with a critical SAN (RFC 5280 section
 * 4.1.2.6) is a valid SVID, for peers and for our own.
 */
x509.cryptoProvider.set(crypto);
const ID = "spiffe://example.org/ns/default/sa/web";
const EC = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
type Hash = "SHA-1" | "SHA-256";

interface Key {
  pair: CryptoKeyPair;
  /** The private key bound to `hash` (WebCrypto RSA keys sign with the hash they were imported for). */
  signer(hash: Hash): Promise<CryptoKey>;
  alg(hash: Hash): { name: string; hash: Hash };
}

async function rsaKey(bits: number): Promise<Key> {
  const pair = (await crypto.subtle.generateKey(
    {
      name: "RSASSA-PKCS1-v1_5",
      modulusLength: bits,
      publicExponent: Uint8Array.of(1, 0, 1),
      hash: "SHA-256",
    },
    true,
    ["sign", "verify"],
  )) as CryptoKeyPair;
  const pkcs8 = await crypto.subtle.exportKey("pkcs8", pair.privateKey);
  return {
    pair,
    signer: (hash) =>
      crypto.subtle.importKey("pkcs8", pkcs8, { name: "RSASSA-PKCS1-v1_5", hash }, true, ["sign"]),
    alg: (hash) => ({ name: "RSASSA-PKCS1-v1_5", hash }),
  };
}

async function ecKey(): Promise<Key> {
  const pair = (await crypto.subtle.generateKey(EC, true, ["sign", "verify"])) as CryptoKeyPair;
  return { pair, signer: async () => pair.privateKey, alg: (hash) => ({ ...EC, hash }) };
}

let serial = 1;
async function issue(o: {
  subject: string;
  key: Key;
  issuer?: { subject: string; key: Key };
  hash?: Hash;
  ca?: boolean;
  uri?: string;
}): Promise<Uint8Array> {
  const hash = o.hash ?? "SHA-256";
  const signer = o.issuer ?? { subject: o.subject, key: o.key };
  const ca = o.ca ?? false;
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: (serial++).toString(16).padStart(2, "0"),
    subject: o.subject,
    issuer: signer.subject,
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + 3_600_000),
    signingAlgorithm: signer.key.alg(hash),
    publicKey: o.key.pair.publicKey,
    signingKey: await signer.key.signer(hash),
    extensions: [
      new x509.BasicConstraintsExtension(ca, undefined, true),
      new x509.KeyUsagesExtension(
        ca ? x509.KeyUsageFlags.keyCertSign : x509.KeyUsageFlags.digitalSignature,
        true,
      ),
      ...(o.uri ? [new x509.SubjectAlternativeNameExtension([{ type: "url", value: o.uri }])] : []),
    ],
  });
  return new Uint8Array(cert.rawData);
}

/** The same certificate signed again by `key` with md5WithRSAEncryption (WebCrypto has no MD5). */
function resignMd5(der: Uint8Array, key: Key): Uint8Array {
  const cert = AsnConvert.parse(der, Certificate);
  const md5 = new AlgorithmIdentifier({ algorithm: "1.2.840.113549.1.1.4", parameters: null });
  cert.tbsCertificate.signature = md5;
  cert.signatureAlgorithm = md5;
  const tbs = new Uint8Array(AsnConvert.serialize(cert.tbsCertificate));
  cert.signatureValue = new Uint8Array(sign("md5", tbs, KeyObject.from(key.pair.privateKey))).buffer;
  return new Uint8Array(AsnConvert.serialize(cert));
}

const trusting = (...anchors: Uint8Array[]) =>
  new BundleSet([new X509Bundle("example.org", anchors.map(parseCert))]);

let root: Key;
let weak: Key;
let leafKey: Key;
let rootDer: Uint8Array;
const ROOT = "CN=strong root";

beforeAll(async () => {
  [root, weak, leafKey] = await Promise.all([rsaKey(2048), rsaKey(1024), ecKey()]);
  rootDer = await issue({ subject: ROOT, key: root, ca: true });
});

describe("key and signature strength along a peer's chain", () => {
  test("an RSA-2048 root with SHA-256 signatures verifies (the control)", async () => {
    const leaf = await issue({
      subject: "O=SPIFFE",
      key: leafKey,
      issuer: { subject: ROOT, key: root },
      uri: ID,
    });
    expect(verifyX509Svid([leaf], trusting(rootDer)).id.uri).toBe(ID);
    const intermediate = await issue({
      subject: "CN=inter",
      key: root,
      issuer: { subject: ROOT, key: root },
      ca: true,
    });
    const below = await issue({
      subject: "O=SPIFFE",
      key: leafKey,
      issuer: { subject: "CN=inter", key: root },
      uri: ID,
    });
    expect(verifyX509Svid([below, intermediate], trusting(rootDer)).chain).toHaveLength(3);
  });

  test("a leaf with a 1024-bit RSA key is refused, for peers and for our own SVID", async () => {
    const leaf = await issue({
      subject: "O=SPIFFE",
      key: weak,
      issuer: { subject: ROOT, key: root },
      uri: ID,
    });
    expect(svcError(() => verifyX509Svid([leaf], trusting(rootDer)))).toEqual({
      code: "invalid_svid",
      message: `invalid X.509-SVID: the leaf ${ID} has a 1024-bit RSA key; at least 2048 bits are required`,
    });
    const pkcs8 = new Uint8Array(await crypto.subtle.exportKey("pkcs8", weak.pair.privateKey));
    expect(svcError(() => parseX509Svid(leaf, pkcs8)).message).toMatch(/has a 1024-bit RSA key/);
  });

  test("an intermediate with a 1024-bit RSA key is refused", async () => {
    const intermediate = await issue({
      subject: "CN=weak inter",
      key: weak,
      issuer: { subject: ROOT, key: root },
      ca: true,
    });
    const leaf = await issue({
      subject: "O=SPIFFE",
      key: leafKey,
      issuer: { subject: "CN=weak inter", key: weak },
      uri: ID,
    });
    expect(svcError(() => verifyX509Svid([leaf, intermediate], trusting(rootDer))).message).toBe(
      'invalid X.509-SVID: signing certificate "CN=weak inter" has a 1024-bit RSA key; at least 2048 bits are required',
    );
  });

  test("a trust anchor with a 1024-bit RSA key is refused", async () => {
    const weakRoot = await issue({ subject: "CN=weak root", key: weak, ca: true });
    const leaf = await issue({
      subject: "O=SPIFFE",
      key: leafKey,
      issuer: { subject: "CN=weak root", key: weak },
      uri: ID,
    });
    expect(svcError(() => verifyX509Svid([leaf], trusting(weakRoot))).message).toBe(
      'invalid X.509-SVID: trust anchor "CN=weak root" has a 1024-bit RSA key; at least 2048 bits are required',
    );
  });

  test("a leaf signed with SHA-1 is refused", async () => {
    const leaf = await issue({
      subject: "O=SPIFFE",
      key: leafKey,
      issuer: { subject: ROOT, key: root },
      uri: ID,
      hash: "SHA-1",
    });
    expect(svcError(() => verifyX509Svid([leaf], trusting(rootDer)))).toEqual({
      code: "invalid_svid",
      message: `invalid X.509-SVID: the leaf ${ID} is signed with SHA-1 (sha1WithRSAEncryption), which is refused`,
    });
  });

  test("a leaf signed with MD5 is refused", async () => {
    const leaf = resignMd5(
      await issue({ subject: "O=SPIFFE", key: leafKey, issuer: { subject: ROOT, key: root }, uri: ID }),
      root,
    );
    expect(svcError(() => verifyX509Svid([leaf], trusting(rootDer))).message).toBe(
      `invalid X.509-SVID: the leaf ${ID} is signed with MD5 (md5WithRSAEncryption), which is refused`,
    );
  });

  test("an intermediate signed with SHA-1 is refused", async () => {
    const intermediate = await issue({
      subject: "CN=sha1 inter",
      key: root,
      issuer: { subject: ROOT, key: root },
      ca: true,
      hash: "SHA-1",
    });
    const leaf = await issue({
      subject: "O=SPIFFE",
      key: leafKey,
      issuer: { subject: "CN=sha1 inter", key: root },
      uri: ID,
    });
    expect(svcError(() => verifyX509Svid([leaf, intermediate], trusting(rootDer))).message).toBe(
      'invalid X.509-SVID: signing certificate "CN=sha1 inter" is signed with SHA-1 (sha1WithRSAEncryption), which is refused',
    );
  });

  test("a trust anchor whose own signature is SHA-1 is refused (OpenSSL lets that one pass)", async () => {
    const sha1Root = await issue({ subject: "CN=sha1 root", key: root, ca: true, hash: "SHA-1" });
    const leaf = await issue({
      subject: "O=SPIFFE",
      key: leafKey,
      issuer: { subject: "CN=sha1 root", key: root },
      uri: ID,
    });
    expect(svcError(() => verifyX509Svid([leaf], trusting(sha1Root))).message).toBe(
      'invalid X.509-SVID: trust anchor "CN=sha1 root" is signed with SHA-1 (sha1WithRSAEncryption), which is refused',
    );
  });
});

describe("an empty subject with a critical subject alternative name (RFC 5280 section 4.1.2.6)", () => {
  const criticalSan = (uri: string) => [{ oid: "2.5.29.17", critical: true, value: seq(ia5(0x86, uri)) }];

  test("is read, verified as a peer, and accepted as our own SVID", async () => {
    const ca = await DevCa.open("example.org");
    const leaf = await ca.issue({ uris: [], ttlMs: 60_000, subject: "", extra: criticalSan(ID) });
    const cert = parseCert(leaf.certDer);
    expect(cert.subject).toBe("");
    expect(cert.extensions.find((e) => e.oid === "2.5.29.17")?.critical).toBe(true);
    const bundles = new BundleSet([new X509Bundle("example.org", [parseCert(ca.caDer)])]);
    expect(verifyX509Svid([leaf.certDer], bundles).id.uri).toBe(ID);
    const own = parseX509Svid(leaf.certDer, leaf.keyDer);
    expect(own.id.uri).toBe(ID);
    expect(own.chain[0]?.subject).toBe("");
  });

  test("an intermediate with an empty subject is named as such in refusals", async () => {
    const ca = await DevCa.open("example.org");
    const inter = await ca.issue({ uris: [], ttlMs: 60_000, subject: "", isCA: false, keyUsage: 32 });
    const leaf = await ca.issue({ uris: [ID], ttlMs: 60_000, signer: { key: inter.key, subject: "" } });
    const bundles = new BundleSet([new X509Bundle("example.org", [parseCert(ca.caDer)])]);
    expect(svcError(() => verifyX509Svid([leaf.certDer, inter.certDer], bundles)).message).toMatch(
      /signing certificate "" is not a CA/,
    );
  });
});
