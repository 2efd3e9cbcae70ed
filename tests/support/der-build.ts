/**
 * DER by hand, for tests that need certificates no generator makes: malformed, huge, or with fixed bytes
 * (deterministic corpora). Nothing here signs: the signatures are fixed bytes of the right shape, which is
 * all a reader looks at.
 */
/** A length encoding that is valid BER but not DER, for the next `at`-th element built (see oddLength). */
type LengthForm = "long" | "padded" | "indefinite";
let odd: { at: number; form: LengthForm } | undefined;
let built = 0;

/** Builds with `build`, giving its `at`-th element (in the order tlv() is called) a non-DER length. */
export function oddLength<T>(at: number, form: LengthForm, build: () => T): T {
  odd = { at, form };
  built = 0;
  try {
    return build();
  } finally {
    odd = undefined;
  }
}

export function tlv(tag: number, ...parts: Uint8Array[]): Uint8Array {
  const body = Buffer.concat(parts);
  const n = body.length;
  if (odd && built++ === odd.at) {
    const { form } = odd;
    if (form === "indefinite" && tag & 0x20) return Uint8Array.from([tag, 0x80, ...body, 0, 0]);
    if (form === "padded")
      return Uint8Array.from([tag, 0x84, n >>> 24, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff, ...body]);
    if (n < 0x80) return Uint8Array.from([tag, 0x81, n, ...body]);
  }
  const len =
    n < 0x80
      ? [n]
      : n < 0x100
        ? [0x81, n]
        : n < 0x10000
          ? [0x82, n >> 8, n & 0xff]
          : [0x83, n >> 16, (n >> 8) & 0xff, n & 0xff];
  return Uint8Array.from([tag, ...len, ...body]);
}

export const seq = (...parts: Uint8Array[]) => tlv(0x30, ...parts);
export const set = (...parts: Uint8Array[]) => tlv(0x31, ...parts);
export const bool = (b: boolean) => tlv(0x01, Uint8Array.of(b ? 0xff : 0));
export const octets = (b: Uint8Array) => tlv(0x04, b);
export const bits = (b: Uint8Array, unused = 0) => tlv(0x03, Uint8Array.of(unused), b);
export const utf8 = (s: string) => tlv(0x0c, Buffer.from(s, "utf8"));
export const ia5 = (tag: number, s: string) => tlv(tag, Buffer.from(s, "latin1"));
export const ctx = (n: number, ...parts: Uint8Array[]) => tlv(0xa0 | n, ...parts);
export const hexBytes = (h: string) => Uint8Array.from(Buffer.from(h, "hex"));

export function int(n: number): Uint8Array {
  const out: number[] = [];
  let v = n;
  do {
    out.unshift(v & 0xff);
    v = Math.floor(v / 256);
  } while (v > 0);
  if ((out[0] as number) & 0x80) out.unshift(0);
  return tlv(0x02, Uint8Array.from(out));
}

export function oid(dotted: string): Uint8Array {
  const [a, b, ...rest] = dotted.split(".").map(Number) as [number, number, ...number[]];
  const out: number[] = [];
  for (const arc of [a * 40 + b, ...rest]) {
    const group = [arc & 0x7f];
    for (let v = Math.floor(arc / 128); v > 0; v = Math.floor(v / 128)) group.unshift((v & 0x7f) | 0x80);
    out.push(...group);
  }
  return tlv(0x06, Uint8Array.from(out));
}

const pad = (n: number, w = 2) => String(n).padStart(w, "0");
const stamp = (d: Date) =>
  `${pad(d.getUTCMonth() + 1)}${pad(d.getUTCDate())}${pad(d.getUTCHours())}${pad(d.getUTCMinutes())}${pad(d.getUTCSeconds())}Z`;
/** A validity time as RFC 5280 wants it: UTCTime through 2049, GeneralizedTime from 2050. */
export function time(d: Date): Uint8Array {
  const y = d.getUTCFullYear();
  return y < 2050
    ? tlv(0x17, Buffer.from(`${pad(y % 100)}${stamp(d)}`, "latin1"))
    : tlv(0x18, Buffer.from(`${pad(y, 4)}${stamp(d)}`, "latin1"));
}

/** A Name from [attribute OID, value] pairs, one attribute per RDN, in order. */
export const name = (...attrs: [string, string][]) =>
  seq(...attrs.map(([o, v]) => set(seq(oid(o), utf8(v)))));
export const CN = "2.5.4.3";
export const O = "2.5.4.10";

export const extension = (id: string, critical: boolean, value: Uint8Array) =>
  seq(oid(id), ...(critical ? [bool(true)] : []), octets(value));

/** Public keys (SubjectPublicKeyInfo), fixed so that certificates built from them are byte-identical. */
export const SPKI = {
  ecP256: hexBytes(
    "3059301306072a8648ce3d020106082a8648ce3d03010703420004a371c98a2aaf239b24152d89a6449e5b9a932d32f8c31fe35872c53f6e247865da05f755890abc0b4b9571db207b3804c5d11c428bdd4462650c7691229f78e8",
  ),
  rsa2048: hexBytes(
    "30820122300d06092a864886f70d01010105000382010f003082010a0282010100c04d545f6d7fd759c9a1fccbadd75c8740dce7f39a74de5955b452bd9c8297b47bf02a51c1fe2586a4e3f5040a2b2522266afbcf99b93dcf23988c1b453064ad62063de28873cf2bb31b9afaf67d2ebdd9d2383fa9fea8824aa283e36e7c9f12dbf878666a6499666a67f953e6b55b462c9267133895f69ba05c5d3b6135e7f714f0457ca4477ab0c1e1f69923404dc49c61c143703a88664252b89bfcc63fcdedb4bcb43137516218f08ce0ad62fdf928c7f788af1edfa4b747377f6e9a54d39826af795529bb3c4edc778672c103cccfb3b8451471654f94a5d0766f8a17bb8b2ffbbadce10d06bafc0b26357b35a9378056302b7d64e580ecb65683cbe77b0203010001",
  ),
  ed25519: hexBytes(
    "302a300506032b6570032100bd1edeecbf63ca48e891e81cc2e11534c769330cdf3992e06c7489133cd26deb",
  ),
};

/** Signature algorithms (AlgorithmIdentifier) and a signature value of a plausible shape for each. */
export const ALG = {
  ecdsaSha256: seq(oid("1.2.840.10045.4.3.2")),
  rsaSha256: seq(oid("1.2.840.113549.1.1.11"), tlv(0x05)),
  rsaSha1: seq(oid("1.2.840.113549.1.1.5"), tlv(0x05)),
  rsaMd5: seq(oid("1.2.840.113549.1.1.4"), tlv(0x05)),
  ed25519: seq(oid("1.3.101.112")),
};
const ECDSA_SIG = seq(tlv(0x02, new Uint8Array(32).fill(0x11)), tlv(0x02, new Uint8Array(32).fill(0x22)));

export interface CertSpec {
  /** 0, 1 or 2 (v1, v2, v3); v1 omits the version field. */
  version?: number;
  serial?: number;
  signatureAlgorithm?: Uint8Array;
  issuer?: Uint8Array;
  notBefore?: Date;
  notAfter?: Date;
  subject?: Uint8Array;
  spki?: Uint8Array;
  /** Encoded Extension elements; none and no [3] field when absent. */
  extensions?: Uint8Array[];
  /** The signature BIT STRING's contents (without the unused-bits octet). */
  signature?: Uint8Array;
}

export function tbs(s: CertSpec): Uint8Array {
  const version = s.version ?? 2;
  return seq(
    ...(version === 0 ? [] : [ctx(0, int(version))]),
    int(s.serial ?? 0x1234),
    s.signatureAlgorithm ?? ALG.ecdsaSha256,
    s.issuer ?? name([O, "SPIFFE"], [CN, "test CA"]),
    seq(
      time(s.notBefore ?? new Date("2025-01-01T00:00:00Z")),
      time(s.notAfter ?? new Date("2035-01-01T00:00:00Z")),
    ),
    s.subject ?? name([O, "SPIFFE"]),
    s.spki ?? SPKI.ecP256,
    ...(s.extensions ? [ctx(3, seq(...s.extensions))] : []),
  );
}

export function certificate(s: CertSpec): Uint8Array {
  const alg = s.signatureAlgorithm ?? ALG.ecdsaSha256;
  const signature =
    s.signature ??
    (alg === ALG.ecdsaSha256 ? ECDSA_SIG : new Uint8Array(alg === ALG.ed25519 ? 64 : 256).fill(0x5a));
  return seq(tbs(s), alg, bits(signature));
}

/** The extensions of a valid X.509-SVID leaf for `uri`. */
export function svidExtensions(uri: string): Uint8Array[] {
  return [
    extension("2.5.29.19", true, seq()),
    extension("2.5.29.15", true, bits(Uint8Array.of(0x80), 7)),
    extension("2.5.29.37", false, seq(oid("1.3.6.1.5.5.7.3.1"), oid("1.3.6.1.5.5.7.3.2"))),
    extension("2.5.29.17", false, seq(ia5(0x86, uri))),
  ];
}
