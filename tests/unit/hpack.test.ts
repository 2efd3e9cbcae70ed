import { describe, expect, test } from "bun:test";
import {
  entrySize,
  type HeaderField,
  HeaderListTooLarge,
  HpackDecoder,
  HpackEncoder,
  HpackError,
} from "../../lib/http2/hpack.ts";
import { huffmanDecode, huffmanEncode } from "../../lib/http2/huffman.ts";

/**
 * HPACK (lib/http2/hpack.ts) against RFC 7541: every example of Appendix C, decoded (and, for the
 * Huffman-coded ones, encoded to the same bytes), then the bounds on what a peer may send. The
 * differential tests against Go's and Python's implementations are tests/integration/hpack-differential.test.ts.
 */
const hex = (s: string) => Uint8Array.from(Buffer.from(s.replace(/\s+/g, ""), "hex"));
const f = (name: string, value: string): HeaderField => ({ name, value });
const toHex = (b: Uint8Array) => Buffer.from(b).toString("hex");

const requests = [
  f(":method", "GET"),
  f(":scheme", "http"),
  f(":path", "/"),
  f(":authority", "www.example.com"),
];
const request2 = [...requests, f("cache-control", "no-cache")];
const request3 = [
  f(":method", "GET"),
  f(":scheme", "https"),
  f(":path", "/index.html"),
  f(":authority", "www.example.com"),
  f("custom-key", "custom-value"),
];
const response1 = [
  f(":status", "302"),
  f("cache-control", "private"),
  f("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
  f("location", "https://www.example.com"),
];
const response2 = [f(":status", "307"), ...response1.slice(1)];
const response3 = [
  f(":status", "200"),
  f("cache-control", "private"),
  f("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
  f("location", "https://www.example.com"),
  f("content-encoding", "gzip"),
  f("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
];

/** RFC 7541 Appendix C: each series shares one decoder (and encoder); [bytes, fields, table size after]. */
const series: {
  name: string;
  tableSize: number;
  huffman: boolean;
  steps: [string, HeaderField[], number][];
}[] = [
  {
    name: "C.3 requests without Huffman coding",
    tableSize: 4096,
    huffman: false,
    steps: [
      ["8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", requests, 57],
      ["8286 84be 5808 6e6f 2d63 6163 6865", request2, 110],
      ["8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65", request3, 164],
    ],
  },
  {
    name: "C.4 requests with Huffman coding",
    tableSize: 4096,
    huffman: true,
    steps: [
      ["8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff", requests, 57],
      ["8286 84be 5886 a8eb 1064 9cbf", request2, 110],
      ["8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf", request3, 164],
    ],
  },
  {
    name: "C.5 responses without Huffman coding",
    tableSize: 256,
    huffman: false,
    steps: [
      [
        `4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
         6c65 2e63 6f6d`,
        response1,
        222,
      ],
      ["4803 3330 37c1 c0bf", response2, 222],
      [
        `88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
         54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
         5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
         3d31`,
        response3,
        215,
      ],
    ],
  },
  {
    name: "C.6 responses with Huffman coding",
    tableSize: 256,
    huffman: true,
    steps: [
      [
        `4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
         2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3`,
        response1,
        222,
      ],
      ["4883 640e ffc1 c0bf", response2, 222],
      [
        `88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
         77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
         9587 3160 65c0 03ed 4ee5 b106 3d50 07`,
        response3,
        215,
      ],
    ],
  },
];

describe("RFC 7541 Appendix C", () => {
  test("C.2 literal with indexing, without, never indexed, and indexed", () => {
    const d = new HpackDecoder();
    expect(d.decode(hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"))).toEqual([
      f("custom-key", "custom-header"),
    ]);
    expect(d.tableSize).toBe(55);
    expect(new HpackDecoder().decode(hex("040c 2f73 616d 706c 652f 7061 7468"))).toEqual([
      f(":path", "/sample/path"),
    ]);
    expect(new HpackDecoder().decode(hex("1008 7061 7373 776f 7264 0673 6563 7265 74"))).toEqual([
      { name: "password", value: "secret", never: true },
    ]);
    expect(new HpackDecoder().decode(hex("82"))).toEqual([f(":method", "GET")]);
  });

  for (const s of series)
    test(`${s.name}: decoded, and the table size after each`, () => {
      const d = new HpackDecoder({ maxTableSize: s.tableSize });
      for (const [bytes, fields, size] of s.steps) {
        expect(d.decode(hex(bytes))).toEqual(fields);
        expect(d.tableSize).toBe(size);
      }
    });

  for (const s of series.filter((x) => x.huffman))
    test(`${s.name}: encoded to the RFC's bytes`, () => {
      const e = new HpackEncoder({ maxTableSize: s.tableSize });
      for (const [bytes, fields] of s.steps) expect(toHex(e.encode(fields))).toBe(toHex(hex(bytes)));
    });

  test("C.2.3: a never-indexed field is encoded never indexed again", () => {
    const e = new HpackEncoder();
    const block = e.encode([{ name: "password", value: "secret", never: true }]);
    expect(block[0] as number).toBe(0x10);
    expect(new HpackDecoder().decode(block)).toEqual([{ name: "password", value: "secret", never: true }]);
  });
});

describe("Huffman coding (RFC 7541 5.2)", () => {
  const refused = (bytes: number[]) => () => huffmanDecode(Uint8Array.from(bytes), 0, bytes.length);
  test("every octet round-trips", () => {
    const all = String.fromCharCode(...Array.from({ length: 256 }, (_, i) => i));
    const out: number[] = [];
    huffmanEncode(all, out);
    expect(huffmanDecode(Uint8Array.from(out), 0, out.length)).toBe(all);
  });
  test("padding longer than 7 bits is refused", () => {
    expect(refused([0xff])).toThrow("longer than 7 bits");
    expect(refused([0x1f, 0xff])).toThrow();
    expect(refused([0xff, 0x9f, 0xff, 0xff, 0xff])).toThrow();
  });
  test("padding that is not the start of EOS is refused", () => {
    // "a" is 00011 (5 bits): three padding bits must be 111.
    expect(refused([0x18])).toThrow("not a prefix of EOS");
    expect(huffmanDecode(Uint8Array.from([0x1f]), 0, 1)).toBe("a");
  });
  test("EOS inside a string is refused", () => {
    expect(refused([0xff, 0xff, 0xff, 0xff, 0xfc])).toThrow("EOS");
  });
});

describe("bounds on what a peer sends", () => {
  const decodeOf =
    (bytes: number[], o = {}) =>
    () =>
      new HpackDecoder(o).decode(Uint8Array.from(bytes));

  test("an integer larger than 2^31 - 1, or longer than 9 continuation octets, is refused", () => {
    expect(decodeOf([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f])).toThrow("integer too large");
    expect(decodeOf([0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80])).toThrow("too long");
    // Redundant zero octets within the limit: index 127 + 0 = 127 is still refused only as an index.
    expect(decodeOf([0xff, 0x80, 0x80, 0x00])).toThrow("index 127 is in neither table");
    expect(decodeOf([0xff, 0xff])).toThrow("runs past the end");
  });
  test("index 0, and an index in neither table, are refused", () => {
    expect(decodeOf([0x80])).toThrow("index 0");
    expect(decodeOf([0x80])).toThrow(HpackError);
    expect(decodeOf([0xbe])).toThrow("index 62 is in neither table");
  });
  test("a string running past the block, or missing, is refused", () => {
    expect(decodeOf([0x40, 0x05, 0x61])).toThrow("runs past the end");
    expect(decodeOf([0x40, 0x01, 0x61])).toThrow("string missing");
  });
  test("a table size update above the allowed size, or after a field, is refused; at the start it applies", () => {
    expect(decodeOf([0x3f, 0xe2, 0x1f], { maxTableSize: 4096 })).toThrow("above the 4096 allowed");
    expect(decodeOf([0x82, 0x20])).toThrow("after a header field");
    const d = new HpackDecoder();
    d.decode(hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"));
    expect(d.tableSize).toBe(55);
    expect(d.decode(Uint8Array.from([0x20, 0x3f, 0xe1, 0x1f, 0x82]))).toEqual([f(":method", "GET")]);
    expect(d.tableSize).toBe(0);
  });
  test("an entry larger than the table empties it and is not added (section 4.4)", () => {
    const e = new HpackEncoder();
    const d = new HpackDecoder({ maxTableSize: 256 });
    d.decode(e.encode([f("x-small", "1")]));
    expect(d.tableSize).toBe(entrySize("x-small", "1"));
    // The encoder's table (4096) takes it, so it is sent with indexing; the decoder's (256) cannot.
    expect(d.decode(e.encode([f("x-large", "l".repeat(300))]))).toEqual([f("x-large", "l".repeat(300))]);
    expect(d.tableSize).toBe(0);
    expect(() => d.decode(Uint8Array.from([0xbe]))).toThrow("index 62 is in neither table");
  });
  test("a header list over the limit is refused, and the table stays in step with the peer", () => {
    const e = new HpackEncoder();
    const d = new HpackDecoder({ maxHeaderListSize: 100 });
    const big = e.encode([f("x-a", "1".repeat(40)), f("x-b", "2".repeat(40))]);
    expect(() => d.decode(big)).toThrow(HeaderListTooLarge);
    // Both entries were added anyway: the next block refers to them by index.
    expect(d.tableSize).toBe(entrySize("x-a", "1".repeat(40)) + entrySize("x-b", "2".repeat(40)));
    expect(d.decode(e.encode([f("x-b", "2".repeat(40))]))).toEqual([f("x-b", "2".repeat(40))]);
  });
  test("an HPACK bomb (one large entry referred to a thousand times) stops at the limit", () => {
    const e = new HpackEncoder();
    const d = new HpackDecoder({ maxHeaderListSize: 16 * 1024 });
    const large = f("x-bomb", "b".repeat(3900));
    d.decode(e.encode([large]));
    const refs = Uint8Array.from({ length: 1000 }, () => 0xbe); // index 62: the entry, each time
    expect(() => d.decode(refs)).toThrow("header list larger than 16384 bytes");
  });
});

describe("the encoder", () => {
  test("encodeLiteral gives the octets encode gives for the same field, and changes no table", () => {
    const names = new Set(["x-request-id", "content-type"]);
    const a = new HpackEncoder({ literalNames: names });
    const b = new HpackEncoder({ literalNames: names });
    const fields = [
      { name: "x-request-id", value: "0b8f5c1e-2d3a-4c6b-9e7f-1a2b3c4d5e6f" },
      { name: "x-request-id", value: "" },
      { name: "x-request-id", value: "v".repeat(126), never: true },
      { name: "x-request-id", value: "w".repeat(127) }, // a length of two octets: through encode
      { name: "x-request-id", value: "caf\xe9" },
      { name: "content-type", value: "application/grpc" }, // a static name: through encode
      { name: "x-other", value: "1" }, // not a literal name: through encode (and indexed)
    ];
    for (const [i, f] of fields.entries()) {
      if (i === 2) {
        a.setPeerMaxTableSize(256); // a table size update pending: through encode
        b.setPeerMaxTableSize(256);
      }
      expect({ i, octets: Array.from(a.encodeLiteral(f)) }).toEqual({ i, octets: Array.from(b.encode([f])) });
    }
    const d = new HpackDecoder();
    expect(d.decode(a.encodeLiteral(fields[0] as HeaderField))).toEqual([fields[0] as HeaderField]);
    expect(d.tableSize).toBe(0);
  });

  test("announces a smaller table, then the final size, at the start of the next block", () => {
    const e = new HpackEncoder();
    e.setPeerMaxTableSize(0);
    e.setPeerMaxTableSize(1024);
    const block = e.encode([f("x-a", "1")]);
    expect(toHex(block.subarray(0, 4))).toBe("203fe107");
    const d = new HpackDecoder();
    expect(d.decode(block)).toEqual([f("x-a", "1")]);
  });
  test("round-trips fields of every octet through one encoder and decoder, many blocks long", () => {
    const e = new HpackEncoder();
    const d = new HpackDecoder();
    for (let i = 0; i < 300; i++) {
      const fields = [
        f(`x-${i % 7}`, String.fromCharCode(...Array.from({ length: i % 50 }, (_, k) => (i * 31 + k) % 256))),
        f(":path", `/items/${i % 13}`),
        { name: "authorization", value: `t${i}`, never: true },
      ];
      expect(d.decode(e.encode(fields))).toEqual(fields);
    }
  });
});
