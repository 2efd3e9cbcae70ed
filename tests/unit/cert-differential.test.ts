import { describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import * as asn1js from "asn1js";
import fc from "fast-check";
import { isSvcError } from "../../lib/errors.ts";
import { BundleSet, X509Bundle } from "../../lib/spiffe/bundle.ts";
import { parseCert } from "../../lib/spiffe/cert.ts";
import { readCertificate } from "../../lib/spiffe/cert-reader.ts";
import { verifyPeerChain } from "../../lib/tls/verified-chains.ts";
import * as D from "../support/der-build.ts";

/**
 * Differential test: the reader (@peculiar/x509 and its ASN.1 stack, held to DER by cert-reader.ts)
 * against node:crypto's X509Certificate (BoringSSL in Bun) on a few hundred certificates: valid ones of
 * every shape the rules look at, and mutations of them (flipped, inserted and deleted bytes, truncation,
 * bytes appended, extra extensions, critical unknown extensions, repeated extensions, lengths in forms DER
 * forbids). Deterministic: the base certificates are built byte by byte from fixed keys, and the
 * mutations come from fast-check with a fixed seed.
 *
 * No certificate may be read by one and refused by the other, except for the reasons listed in
 * DOCUMENTED (and in docs/identity.md). All of them are refusals by our reader of what BoringSSL's parser
 * lets through at construction time; none goes the other way. (In service both must read a certificate:
 * parseCert refuses what node:crypto cannot read.)
 */
const {
  certificate,
  extension,
  svidExtensions,
  seq,
  ALG,
  SPKI,
  name,
  CN,
  O,
  oid,
  ia5,
  ctx,
  tlv,
  bits,
  int,
  bool,
} = D;

const BASES: Record<string, D.CertSpec> = {
  svid: { extensions: svidExtensions("spiffe://example.org/ns/a/sa/b") },
  ca: {
    signatureAlgorithm: ALG.rsaSha256,
    spki: SPKI.rsa2048,
    subject: name([O, "SPIFFE"], [CN, "test CA"]),
    extensions: [
      extension("2.5.29.19", true, seq(bool(true), int(1))),
      extension("2.5.29.15", true, bits(Uint8Array.of(0x06), 1)),
      extension("2.5.29.17", false, seq(ia5(0x86, "spiffe://example.org"))),
      extension(
        "2.5.29.30",
        true,
        seq(ctx(0, seq(ia5(0x86, ".example.org"))), ctx(1, seq(ia5(0x82, "bad.example.org")))),
      ),
    ],
  },
  emptySubject: {
    signatureAlgorithm: ALG.ed25519,
    spki: SPKI.ed25519,
    subject: seq(),
    extensions: [extension("2.5.29.17", true, seq(ia5(0x86, "spiffe://example.org/x")))],
  },
  sha1GeneralizedTime: {
    signatureAlgorithm: ALG.rsaSha1,
    spki: SPKI.rsa2048,
    notAfter: new Date("2051-06-01T00:00:00Z"),
    extensions: svidExtensions("spiffe://example.org/y"),
  },
  v1: { version: 0 },
  manyExtensions: {
    extensions: [
      ...svidExtensions("spiffe://example.org/z"),
      ...Array.from({ length: 20 }, (_, i) => extension(`1.3.6.1.4.1.99999.${i}`, i % 5 === 0, seq(int(i)))),
    ],
  },
  sans: {
    extensions: [
      extension(
        "2.5.29.17",
        false,
        seq(
          ia5(0x82, "a.example.org"),
          tlv(0x87, Uint8Array.of(10, 0, 0, 1)),
          ia5(0x81, "a@example.org"),
          ia5(0x86, "spiffe://example.org/s"),
          ctx(4, name([CN, "dir"])),
          ctx(0, oid("1.2.3.4"), ctx(0, D.utf8("x"))),
        ),
      ),
    ],
  },
};
const bases = Object.fromEntries(Object.entries(BASES).map(([k, s]) => [k, certificate(s)]));
const names = Object.keys(BASES);

type Mutation =
  | { kind: "flip"; base: string; at: number; xor: number }
  | { kind: "truncate"; base: string; at: number }
  | { kind: "append"; base: string; bytes: Uint8Array }
  | { kind: "insert"; base: string; at: number; byte: number }
  | { kind: "delete"; base: string; at: number }
  | { kind: "extensions"; base: string; extra: { arcs: number[]; critical: boolean; value: Uint8Array }[] }
  | { kind: "repeat"; base: string; which: number }
  | { kind: "length"; base: string; at: number; form: "long" | "padded" | "indefinite" };

const base = fc.constantFrom(...names);
const MUTATIONS: fc.Arbitrary<Mutation> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant("flip"),
      base,
      at: fc.nat(),
      xor: fc.integer({ min: 1, max: 255 }),
    }),
  },
  fc.record({ kind: fc.constant("truncate"), base, at: fc.nat() }),
  fc.record({ kind: fc.constant("append"), base, bytes: fc.uint8Array({ minLength: 1, maxLength: 4 }) }),
  fc.record({ kind: fc.constant("insert"), base, at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ kind: fc.constant("delete"), base, at: fc.nat() }),
  fc.record({
    kind: fc.constant("extensions"),
    base,
    extra: fc.array(
      fc.record({
        arcs: fc.array(fc.integer({ min: 0, max: 100_000 }), { minLength: 1, maxLength: 4 }),
        critical: fc.boolean(),
        value: fc.uint8Array({ maxLength: 40 }),
      }),
      { minLength: 1, maxLength: 30 },
    ),
  }),
  fc.record({
    kind: fc.constant("repeat"),
    base: fc.constantFrom("svid", "ca", "emptySubject"),
    which: fc.nat(),
  }),
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("length"),
      base,
      at: fc.nat({ max: 60 }),
      form: fc.constantFrom("long" as const, "padded" as const, "indefinite" as const),
    }),
  },
);

function apply(m: Mutation): Uint8Array {
  const spec = BASES[m.base] as D.CertSpec;
  const b = bases[m.base] as Uint8Array;
  const at = "at" in m ? m.at % b.length : 0;
  switch (m.kind) {
    case "flip": {
      const c = b.slice();
      c[at] = (c[at] as number) ^ m.xor;
      return c;
    }
    case "truncate":
      return b.subarray(0, at);
    case "append":
      return Uint8Array.from([...b, ...m.bytes]);
    case "insert":
      return Uint8Array.from([...b.subarray(0, at), m.byte, ...b.subarray(at)]);
    case "delete":
      return Uint8Array.from([...b.subarray(0, at), ...b.subarray(at + 1)]);
    case "extensions":
      return certificate({
        ...spec,
        version: 2,
        extensions: [
          ...(spec.extensions ?? []),
          ...m.extra.map((e) => extension(`1.3.6.1.4.1.${e.arcs.join(".")}`, e.critical, e.value)),
        ],
      });
    case "repeat": {
      const list = spec.extensions as Uint8Array[];
      return certificate({ ...spec, extensions: [...list, list[m.which % list.length] as Uint8Array] });
    }
    case "length":
      return D.oddLength(m.at, m.form, () => certificate(spec));
  }
}

/**
 * Where a base's fields of type ANY lie, as [start, end) byte ranges: the attribute values of its issuer
 * and subject names, and the parameters of its three AlgorithmIdentifiers (signature, key, signature).
 */
function anyFields(der: Uint8Array): [number, number][] {
  type Node = { valueBlock: { value?: Node[] }; valueBeforeDecodeView: Uint8Array };
  const root = asn1js.fromBER(der).result as unknown as Node;
  const kids = (n: Node | undefined) => n?.valueBlock.value ?? [];
  const tbs = kids(kids(root)[0]);
  const fields = (tbs[0]?.valueBeforeDecodeView[0] ?? 0) === 0xa0 ? tbs.slice(1) : tbs;
  const values: Node[] = [];
  for (const nameNode of [fields[2], fields[4]])
    for (const rdn of kids(nameNode)) for (const atv of kids(rdn)) values.push(kids(atv)[1] as Node);
  for (const alg of [fields[1], kids(fields[5])[0], kids(root)[1]]) values.push(...kids(alg).slice(1));
  return values.map(({ valueBeforeDecodeView: v }) => [v.byteOffset, v.byteOffset + v.byteLength]);
}

/**
 * The documented differences. Each: why, and which (mutation, refusal) it covers. Every one is a
 * certificate BoringSSL's parser constructs and our reader refuses.
 */
const DOCUMENTED: { reason: string; covers: (m: Mutation, refusal: string) => boolean }[] = [
  {
    reason:
      "a fault inside the value of basicConstraints, keyUsage, subjectAltName or nameConstraints: svc reads " +
      "these four at once; BoringSSL parses extension values only when something asks for them",
    covers: (_, r) => /^malformed certificate: extension 2\.5\.29\.(19|15|17|30): /.test(r),
  },
  {
    reason: "an extension that appears twice (RFC 5280 section 4.2): BoringSSL does not check at parse time",
    covers: (_, r) => / appears twice$/.test(r),
  },
  {
    reason: "a BOOLEAN other than 0x00 or 0xff (DER): BoringSSL takes any non-zero octet as TRUE",
    covers: (_, r) => /malformed BOOLEAN/.test(r),
  },
  {
    reason:
      "the subject's public key: an RSA key whose contents do not parse: svc reads the modulus at once (the " +
      "2048-bit rule); BoringSSL parses a key when it is used",
    covers: (_, r) => /^malformed certificate: RSA public key: /.test(r),
  },
  {
    reason:
      "unused bits in the BIT STRING of the public key or of the signature: asn1-schema holds both as whole " +
      "octets, so svc refuses rather than misread them; BoringSSL looks at them when it verifies",
    covers: (_, r) => /^malformed certificate: (public key|signature) BIT STRING with unused bits$/.test(r),
  },
  {
    reason:
      "a field of type ANY (a name attribute value, algorithm parameters) holding an element of an unusual " +
      "type, or garbage inside a constructed one: BoringSSL keeps such fields as opaque bytes until they are " +
      "used; asn1js parses every constructed element, and @peculiar/x509 formats every attribute value",
    covers: (m, _) => {
      if (m.kind !== "flip") return false;
      const der = bases[m.base] as Uint8Array;
      const at = m.at % der.length;
      return anyFields(der).some(([start, end]) => at >= start && at < end);
    },
  },
];

const ours = (der: Uint8Array): string | undefined => {
  try {
    readCertificate(der);
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
};
/** node:crypto reads a certificate when it constructs one from exactly these bytes: it ignores trailing data. */
const nativeReads = (der: Uint8Array): boolean => {
  try {
    return new X509Certificate(Buffer.from(der)).raw.equals(Buffer.from(der));
  } catch {
    return false;
  }
};

describe("the reader against node:crypto", () => {
  test("the base certificates are read by both", () => {
    for (const [k, der] of Object.entries(bases)) {
      expect([k, ours(der)]).toEqual([k, undefined]);
      expect([k, nativeReads(der)]).toEqual([k, true]);
    }
  });

  test("no certificate is read by one and refused by the other, but for the documented reasons", () => {
    const corpus = fc.sample(MUTATIONS, { seed: 20_261_125, numRuns: 600 });
    const tally = { bothRead: 0, bothRefuse: 0, documented: new Map<string, number>() };
    const undocumented: string[] = [];
    for (const m of corpus) {
      const der = apply(m);
      const refusal = ours(der);
      const native = nativeReads(der);
      if (refusal === undefined && native) tally.bothRead++;
      else if (refusal !== undefined && !native) tally.bothRefuse++;
      else if (refusal === undefined)
        undocumented.push(`read by svc, refused by node:crypto: ${JSON.stringify(m)}`);
      else {
        const hit = DOCUMENTED.find((d) => d.covers(m, refusal));
        if (hit) tally.documented.set(hit.reason, (tally.documented.get(hit.reason) ?? 0) + 1);
        else undocumented.push(`refused by svc (${refusal}), read by node:crypto: ${JSON.stringify(m)}`);
      }
    }
    expect(undocumented).toEqual([]);
    // The corpus exercises both sides of the comparison.
    expect(tally.bothRead).toBeGreaterThan(100);
    expect(tally.bothRefuse).toBeGreaterThan(100);
  });

  test("in service every failure to read or verify is an SvcError, whatever the bytes", () => {
    const anchor = parseCert(bases.ca as Uint8Array);
    const bundles = new BundleSet([new X509Bundle("example.org", [anchor])]);
    for (const m of fc.sample(MUTATIONS, { seed: 7, numRuns: 300 })) {
      const der = apply(m);
      for (const attempt of [
        () => parseCert(der),
        () => verifyPeerChain([der, bases.ca as Uint8Array], bundles),
      ]) {
        try {
          attempt();
        } catch (e) {
          expect(isSvcError(e)).toBe(true);
          expect((e as Error).message).not.toMatch(/error:[0-9a-f]{8}|OPENSSL|TypeError|RangeError/);
        }
      }
    }
  });
});
