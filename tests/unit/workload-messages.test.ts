import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  decodeStruct,
  encodeStruct,
  jwtBundlesResponse,
  jwtSvidRequest,
  jwtSvidResponse,
  validateJwtSvidRequest,
  validateJwtSvidResponse,
  x509BundlesResponse,
  x509SvidResponse,
} from "../../lib/spiffe/workload-messages.ts";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const bytes = fc.uint8Array({ minLength: 1, maxLength: 300 });
const text = fc.string({ minLength: 1, maxLength: 40 });

describe("Workload API wire format", () => {
  test("JWTSVIDRequest matches hand-computed protobuf bytes", () => {
    // field 1 (audience, LEN) "a", "bc"; field 2 (spiffe_id, LEN) "d"
    expect(hex(jwtSvidRequest.encode({ audience: ["a", "bc"], spiffeId: "d" }))).toBe("0a01610a026263120164");
  });

  test("X509SVIDResponse matches hand-computed bytes, including a 2-byte length varint", () => {
    const der = new Uint8Array(200).fill(7);
    const encoded = x509SvidResponse.encode({
      svids: [
        { spiffeId: "s", x509Svid: der, x509SvidKey: Uint8Array.of(1), bundle: Uint8Array.of(2), hint: "" },
      ],
      crl: [],
      federatedBundles: new Map([["t", Uint8Array.of(3)]]),
    });
    // svid body: 0a 01 73 | 12 c8 01 <200×07> | 1a 01 01 | 22 01 02  => 3 + 203 + 3 + 3 = 212 = 0xd4 0x01
    const svid = `0a0173${"12c801"}${"07".repeat(200)}1a0101220102`;
    // map entry: 0a 01 74 12 01 03 (6 bytes) in field 3
    expect(hex(encoded)).toBe(`0ad401${svid}1a060a0174120103`);
  });

  test("unknown fields are skipped, as proto3 requires", () => {
    // field 9 varint, field 10 LEN before the known field 2
    const buf = Uint8Array.from([0x48, 0x05, 0x52, 0x01, 0xff, 0x12, 0x01, 0x78]);
    expect(jwtSvidRequest.decode(buf)).toEqual({ audience: [], spiffeId: "x" });
  });

  test("truncated input is an error, not a partial message", () => {
    expect(() => jwtSvidRequest.decode(Uint8Array.from([0x12, 0x05, 0x78]))).toThrow(/truncated/);
  });

  test("X509SVIDResponse round-trips", () => {
    const svid = fc.record({
      spiffeId: text,
      x509Svid: bytes,
      x509SvidKey: bytes,
      bundle: bytes,
      hint: fc.string(),
    });
    fc.assert(
      fc.property(
        fc.array(svid, { maxLength: 3 }),
        fc.array(bytes, { maxLength: 2 }),
        fc.dictionary(text, bytes),
        (svids, crl, fed) => {
          const msg = { svids, crl, federatedBundles: new Map(Object.entries(fed)) };
          expect(x509SvidResponse.decode(x509SvidResponse.encode(msg))).toEqual(msg);
        },
      ),
      { numRuns: 50 },
    );
  });

  test("bundle, JWT and validation messages round-trip", () => {
    const bundles = new Map([["spiffe://example.org", Uint8Array.of(1, 2, 3)]]);
    expect(
      x509BundlesResponse.decode(x509BundlesResponse.encode({ crl: [Uint8Array.of(9)], bundles })),
    ).toEqual({ crl: [Uint8Array.of(9)], bundles });
    expect(jwtBundlesResponse.decode(jwtBundlesResponse.encode({ bundles }))).toEqual({ bundles });
    const svids = [{ spiffeId: "spiffe://example.org/a", svid: "x.y.z", hint: "h" }];
    expect(jwtSvidResponse.decode(jwtSvidResponse.encode({ svids }))).toEqual({ svids });
    expect(
      validateJwtSvidRequest.decode(validateJwtSvidRequest.encode({ audience: "a", svid: "s" })),
    ).toEqual({ audience: "a", svid: "s" });
    const claims = {
      sub: "spiffe://example.org/a",
      aud: ["x", "y"],
      exp: 1795265137,
      nested: { ok: true, none: null, zero: 0, f: false },
    };
    expect(
      validateJwtSvidResponse.decode(
        validateJwtSvidResponse.encode({ spiffeId: "spiffe://example.org/a", claims }),
      ),
    ).toEqual({
      spiffeId: "spiffe://example.org/a",
      claims,
    });
  });

  test("a Struct key named __proto__ stays a plain property and never becomes the prototype", () => {
    const claims = JSON.parse('{"__proto__": {"polluted": true}, "sub": "x"}');
    const decoded = decodeStruct(encodeStruct(claims));
    expect(Object.keys(decoded)).toEqual(["__proto__", "sub"]);
    expect(Object.getPrototypeOf(decoded)).toBe(Object.prototype);
    expect((decoded as { polluted?: boolean }).polluted).toBeUndefined();
  });

  test("google.protobuf.Struct round-trips any JSON object", () => {
    fc.assert(
      fc.property(
        fc.jsonValue().filter((v) => typeof v === "object" && v !== null && !Array.isArray(v)),
        (v) => {
          const obj = JSON.parse(JSON.stringify(v)); // -0 and the like become what JSON would carry
          expect(decodeStruct(encodeStruct(obj))).toEqual(obj);
        },
      ),
      { numRuns: 100 },
    );
  });
});
