import "reflect-metadata";
import { beforeAll, describe, expect, test } from "bun:test";
import * as x509 from "@peculiar/x509";
import { DevCa } from "../../lib/dev/ca.ts";
import { parseCert } from "../../lib/spiffe/cert.ts";
import { readTime } from "../../lib/spiffe/cert-reader.ts";

/**
 * The certificate reader (lib/spiffe/cert-reader.ts: @peculiar/x509's ASN.1 stack, held to DER) against
 * @peculiar/x509's own X509Certificate on certificates of every shape the SVID rules look at, and against
 * malformed DER.
 */
let ca: DevCa;
beforeAll(async () => {
  ca = await DevCa.open("example.org");
});

function reference(der: Uint8Array) {
  const c = new x509.X509Certificate(der);
  const bc = c.getExtension(x509.BasicConstraintsExtension);
  const ku = c.getExtension(x509.KeyUsagesExtension);
  const san = c.getExtension(x509.SubjectAlternativeNameExtension);
  return {
    notBefore: c.notBefore.getTime(),
    notAfter: c.notAfter.getTime(),
    isCA: bc ? bc.ca : undefined,
    pathLength: bc?.pathLength,
    keyUsage: ku ? ku.usages : undefined,
    uriSans: san ? san.names.items.filter((n) => n.type === "url").map((n) => n.value) : [],
    extensions: c.extensions.map((e) => ({ oid: e.type, critical: e.critical })),
  };
}

const ours = (der: Uint8Array) => {
  const c = parseCert(der);
  return {
    notBefore: c.notBefore.getTime(),
    notAfter: c.notAfter.getTime(),
    isCA: c.isCA,
    pathLength: c.pathLength,
    keyUsage: c.keyUsage,
    uriSans: c.uriSans,
    extensions: c.extensions,
  };
};

describe("certificate reader", () => {
  test("agrees with a full ASN.1 implementation on CA, leaf and odd certificates", async () => {
    const specs = [
      { uris: ["spiffe://example.org/a"], ttlMs: 60_000 },
      { uris: ["spiffe://example.org/a", "spiffe://example.org/b", "https://x.test/"], ttlMs: 1 },
      { uris: [], ttlMs: 3_600_000, isCA: true },
      { uris: ["spiffe://example.org/a"], ttlMs: 60_000, keyUsage: 0x1ff },
      { uris: ["spiffe://example.org/a"], ttlMs: 60_000, keyUsage: 0x100 },
      // Past 2049 the validity is a GeneralizedTime.
      { uris: ["spiffe://example.org/a"], ttlMs: 40 * 365 * 86_400_000 },
    ];
    for (const spec of specs) {
      const { certDer } = await ca.issue(spec);
      expect(ours(certDer)).toEqual(reference(certDer));
    }
    expect(ours(ca.caDer)).toEqual(reference(ca.caDer));
  });

  test("a key usage extension with no bit set reads as 0 (the reference library says NaN)", async () => {
    const { certDer } = await ca.issue({ uris: ["spiffe://example.org/a"], ttlMs: 1000, keyUsage: 0 });
    expect(parseCert(certDer).keyUsage).toBe(0);
  });

  test("subject and issuer read as one line", async () => {
    const { certDer } = await ca.issue({ uris: [], ttlMs: 1000, subject: "O=SPIFFE, CN=leaf" });
    expect(parseCert(certDer).subject).toBe("O=SPIFFE, CN=leaf");
  });

  test("malformed DER is refused, naming the fault", async () => {
    const { certDer } = await ca.issue({ uris: ["spiffe://example.org/a"], ttlMs: 1000 });
    const cases: [Uint8Array, RegExp][] = [
      [certDer.subarray(0, certDer.length - 1), /runs past its container/],
      [Uint8Array.from([...certDer, 0]), /bytes after the certificate/],
      [Uint8Array.from([0x30, 0x80, 0, 0]), /indefinite length/],
      [Uint8Array.from([0x30, 0x81, 0x05, 1, 2, 3, 4, 5]), /shortest form/],
      [Uint8Array.from([0x30, 0x85, 1, 1, 1, 1, 1]), /length of 5 bytes/],
      [Uint8Array.from([0x1f, 0x01, 0x00]), /multi-byte tag/],
      [Uint8Array.from([0x30]), /truncated element/],
      [Uint8Array.from([0x02, 0x01, 0x00]), /certificate: expected tag/],
    ];
    for (const [der, why] of cases) expect(() => parseCert(der)).toThrow(why);
  });

  test("an extension that appears twice is refused", async () => {
    const { certDer } = await ca.issue({ uris: ["spiffe://example.org/a"], ttlMs: 1000 });
    // Rename the subjectKeyIdentifier OID (2.5.29.14) to keyUsage's (2.5.29.15): two keyUsage
    // extensions. The signature no longer matches, but the reader must refuse before anyone asks.
    const hex = Buffer.from(certDer).toString("hex").replace("0603551d0e", "0603551d0f");
    expect(() => parseCert(Buffer.from(hex, "hex"))).toThrow(/2\.5\.29\.15 appears twice/);
  });

  test("times: both encodings, and impossible dates refused", () => {
    const t = (tag: number, s: string) => {
      const der = Uint8Array.from([tag, s.length, ...Buffer.from(s, "latin1")]);
      return readTime(der);
    };
    expect(t(0x17, "491231235959Z").toISOString()).toBe("2049-12-31T23:59:59.000Z");
    expect(t(0x17, "500101000000Z").toISOString()).toBe("1950-01-01T00:00:00.000Z");
    expect(t(0x18, "20500101000000Z").toISOString()).toBe("2050-01-01T00:00:00.000Z");
    expect(t(0x18, "00500101000000Z").getUTCFullYear()).toBe(50);
    for (const [tag, s] of [
      [0x17, "260230000000Z"],
      [0x17, "261123246000Z"],
      [0x17, "2611232300Z"],
      [0x17, "261123230000+0100"],
      [0x18, "261123230000Z"],
      [0x04, "261123230000Z"],
    ] as const) {
      expect(() => t(tag, s)).toThrow(/time/);
    }
  });
});
