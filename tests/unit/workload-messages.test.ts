import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { isSvcError } from "../../lib/errors.ts";
import {
  type JsonValue,
  jwtBundlesResponse,
  jwtSvidRequest,
  jwtSvidResponse,
  SERVICE,
  validateJwtSvidRequest,
  validateJwtSvidResponse,
  x509BundlesResponse,
  x509SvidResponse,
} from "../../lib/spiffe/workload-messages.ts";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const unhex = (h: string) => Uint8Array.from(Buffer.from(h.replace(/\s/g, ""), "hex"));
const bytes = fc.uint8Array({ minLength: 1, maxLength: 300 });
const text = fc.string({ minLength: 1, maxLength: 40 });

// google.protobuf.Struct through the message that carries it (ValidateJWTSVIDResponse.claims).
const encodeStruct = (claims: Record<string, JsonValue>) =>
  validateJwtSvidResponse.encode({ spiffeId: "", claims });
const decodeStruct = (buf: Uint8Array) => validateJwtSvidResponse.decode(buf).claims;

/** The error decoding `buf` throws: always the project's SvcError `workload_api`. */
function decodeError(decode: (b: Uint8Array) => unknown, buf: Uint8Array): string {
  try {
    decode(buf);
  } catch (e) {
    expect(isSvcError(e, "workload_api")).toBe(true);
    return (e as Error).message;
  }
  throw new Error("decoded without an error");
}

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
    expect(decodeError(jwtSvidRequest.decode, Uint8Array.from([0x12, 0x05, 0x78]))).toBe("truncated field 2");
    // A map entry announced with 100 bytes that are not there (the hostile server of grpc-channel.test.ts).
    expect(decodeError(jwtBundlesResponse.decode, Uint8Array.from([0x0a, 100, 1]))).toBe("truncated field 1");
    expect(decodeError(jwtSvidRequest.decode, Uint8Array.from([0x12, 0x80]))).toBe("truncated varint");
    expect(decodeError(jwtSvidRequest.decode, Uint8Array.from([0x49, 1, 2, 3]))).toBe(
      "truncated fixed field",
    );
    expect(decodeError(jwtSvidRequest.decode, Uint8Array.from([0x48, ...Array(10).fill(0xff), 1]))).toBe(
      "varint too long",
    );
  });

  test("a known field with the wrong wire type is refused, naming the field, never misread", () => {
    // JWTSVIDRequest.spiffe_id (2) as a varint: a reader going by the schema alone would take 5 as a length.
    expect(decodeError(jwtSvidRequest.decode, unhex("1005 0a0161"))).toBe("field 2 is not length-delimited");
    // Inside a nested message and a map entry.
    expect(decodeError(x509SvidResponse.decode, unhex("0a02 1001"))).toBe("field 2 is not length-delimited");
    expect(decodeError(x509BundlesResponse.decode, unhex("1202 0801"))).toBe(
      "field 1 is not length-delimited",
    );
    // google.protobuf.Value: number_value (2) must be a double, bool_value (4) a varint.
    const claim = (value: string) => {
      const entry = `0a0161 12${(value.length / 2).toString(16).padStart(2, "0")}${value}`.replace(/\s/g, "");
      const struct = `0a${(entry.length / 2).toString(16).padStart(2, "0")}${entry}`;
      return unhex(`12${(struct.length / 2).toString(16).padStart(2, "0")}${struct}`);
    };
    expect(decodeStruct(claim("2001"))).toEqual({ a: true });
    expect(decodeError(validateJwtSvidResponse.decode, claim("1001"))).toBe("field 2 is not a double");
    expect(decodeError(validateJwtSvidResponse.decode, claim("2201ff"))).toBe("field 4 is not a varint");
  });

  test("groups, reserved wire types, field 0 and invalid UTF-8 are refused", () => {
    expect(decodeError(jwtSvidRequest.decode, unhex("4b 4c"))).toBe("unsupported wire type 3 for field 9");
    expect(decodeError(jwtSvidRequest.decode, unhex("4e"))).toBe("unsupported wire type 6 for field 9");
    expect(decodeError(jwtSvidRequest.decode, unhex("0201 00"))).toBe("invalid tag for field 0");
    expect(decodeError(jwtSvidRequest.decode, unhex("1202 c328"))).toBe("field 2 is not valid UTF-8");
    expect(decodeError(jwtBundlesResponse.decode, unhex("0a04 0a02c328"))).toBe("field 1 is not valid UTF-8");
    // Bytes fields carry anything.
    expect(x509BundlesResponse.decode(unhex("0a02 c328")).crl).toEqual([unhex("c328")]);
  });

  test("nesting is bounded: a Struct 200 levels deep is refused, not a stack overflow", () => {
    let claims: Record<string, JsonValue> = { leaf: true };
    for (let i = 0; i < 200; i++) claims = { n: claims };
    expect(decodeError(validateJwtSvidResponse.decode, encodeStruct(claims))).toBe(
      "messages nested more than 100 deep",
    );
    let shallow: Record<string, JsonValue> = { leaf: true };
    for (let i = 0; i < 40; i++) shallow = { n: shallow };
    expect(decodeStruct(encodeStruct(shallow))).toEqual(shallow);
  });

  test("whatever a server sends, decoding yields a message or the project's error, nothing else", () => {
    const decoders = [
      x509SvidResponse.decode,
      x509BundlesResponse.decode,
      jwtSvidResponse.decode,
      jwtBundlesResponse.decode,
      validateJwtSvidResponse.decode,
      jwtSvidRequest.decode,
      validateJwtSvidRequest.decode,
    ];
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), fc.constantFrom(...decoders), (buf, decode) => {
        try {
          decode(buf);
        } catch (e) {
          expect(isSvcError(e, "workload_api")).toBe(true);
        }
      }),
      { numRuns: 2000 },
    );
  });

  test("the gRPC service keeps its public name: methods are /SpiffeWorkloadAPI/<Rpc>", () => {
    expect(SERVICE).toBe("SpiffeWorkloadAPI");
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

  test("a map key named __proto__ stays a Map key and pollutes nothing", () => {
    const federatedBundles = new Map([["__proto__", Uint8Array.of(1)]]);
    const decoded = x509SvidResponse.decode(
      x509SvidResponse.encode({ svids: [], crl: [], federatedBundles }),
    );
    expect([...decoded.federatedBundles]).toEqual([["__proto__", Uint8Array.of(1)]]);
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
