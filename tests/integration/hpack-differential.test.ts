import { afterAll, describe, expect, test } from "bun:test";
import { type HeaderField, HeaderListTooLarge, HpackDecoder, HpackEncoder } from "../../lib/http2/hpack.ts";
import { type Answer, type HpackPeer, startHpackPeers } from "../support/hpack-peers.ts";

/**
 * HPACK (lib/http2/hpack.ts) against two independent implementations, Debian's python3-hpack and Go's
 * golang.org/x/net/http2/hpack (tests/support/hpack-peers.ts), on generated header lists and on mutated
 * blocks, with a fixed seed so that a failure repeats:
 *
 * - what ours encodes, both decode to the list it was given, block after block (dynamic table in step),
 *   with table sizes 4096, 256, 0 and 65536 announced;
 * - what either encodes (Python with and without Huffman coding, Go), ours decodes to what they decode;
 * - mutated blocks: ours never accepts one that both refuse, and decodes every one both accept alike to
 *   what they decode.
 */
const peers = startHpackPeers();
afterAll(async () => {
  await Promise.all(peers.map((p) => p.stop()));
});

/** mulberry32: a small seeded generator, so that every run draws the same cases. */
function random(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  return { next, int, pick: <T>(xs: readonly T[]) => xs[int(xs.length)] as T };
}

const NAMES = [":method", ":path", ":authority", ":scheme", ":status", "content-type", "accept", "cookie"];
const VALUES = ["GET", "POST", "/", "/index.html", "200", "404", "application/grpc", "gzip, deflate", ""];

function fieldsOf(r: ReturnType<typeof random>): HeaderField[] {
  const bytes = (n: number, from: number, span: number) =>
    String.fromCharCode(...Array.from({ length: n }, () => from + r.int(span)));
  const name = () => {
    const roll = r.next();
    if (roll < 0.4) return r.pick(NAMES);
    if (roll < 0.9) return `x-${bytes(1 + r.int(12), 97, 26)}`;
    return bytes(1 + r.int(10), 0, 256); // HPACK carries any octets; HTTP's rules are not its business
  };
  const value = () => {
    const roll = r.next();
    if (roll < 0.3) return r.pick(VALUES);
    if (roll < 0.8) return bytes(r.int(40), 32, 95);
    if (roll < 0.95) return bytes(r.int(60), 0, 256);
    return bytes(300 + r.int(1500), 32, 95);
  };
  return Array.from({ length: 1 + r.int(12) }, () => {
    const f = { name: name(), value: value() };
    return r.next() < 0.1 ? { ...f, never: true } : f;
  });
}

const fieldsFrom = (a: Answer): HeaderField[] | undefined => ("fields" in a ? a.fields : undefined);
const blockFrom = (a: Answer): Uint8Array => {
  if (!("block" in a)) throw new Error(`a reference refused to encode: ${"error" in a ? a.error : "?"}`);
  return a.block;
};

let sessions = 0;
const openAll = async (tableSize: number) => {
  const id = ++sessions;
  await Promise.all(peers.map((p) => p.open(id, tableSize)));
  return id;
};

describe("HPACK, ours against python3-hpack and Go's", () => {
  for (const tableSize of [4096, 256, 0, 65536])
    test(`what ours encodes both decode to the same list (table size ${tableSize} announced)`, async () => {
      const r = random(tableSize + 1);
      let blocks = 0;
      for (let s = 0; s < 5; s++) {
        const id = await openAll(tableSize);
        // The encoder may use as much table as the peers allow (its own cap otherwise stays at 4096).
        const ours = new HpackEncoder({ maxTableSize: Math.max(tableSize, 4096) });
        ours.setPeerMaxTableSize(tableSize);
        for (let b = 0; b < 20; b++) {
          const fields = fieldsOf(r);
          const block = ours.encode(fields);
          for (const p of peers)
            expect({ peer: p.name, got: await p.decode(id, block) }).toEqual({
              peer: p.name,
              got: { fields },
            });
          blocks++;
        }
      }
      expect(blocks).toBe(100);
    }, 60_000);

  const encoders: { name: string; peer: HpackPeer; huffman: boolean }[] = [
    { name: "python3-hpack, Huffman", peer: peers[0] as HpackPeer, huffman: true },
    { name: "python3-hpack, raw strings", peer: peers[0] as HpackPeer, huffman: false },
    { name: "Go", peer: peers[1] as HpackPeer, huffman: true },
  ];
  for (const [k, e] of encoders.entries())
    test(`what ${e.name} encodes ours decodes as both do`, async () => {
      const r = random(100 + k);
      for (let s = 0; s < 5; s++) {
        const id = await openAll(4096);
        const ours = new HpackDecoder();
        for (let b = 0; b < 20; b++) {
          const fields = fieldsOf(r);
          const block = blockFrom(await e.peer.encode(id, fields, e.huffman));
          const theirs = await Promise.all(peers.map((p) => p.decode(id, block)));
          const decoded = ours.decode(block);
          expect(decoded.map(({ name, value }) => ({ name, value }))).toEqual(
            fields.map(({ name, value }) => ({ name, value })),
          );
          for (const t of theirs) expect(decoded).toEqual(fieldsFrom(t) as HeaderField[]);
        }
      }
    }, 60_000);

  test("mutated blocks: never accepted when both refuse, decoded alike when both accept", async () => {
    const r = random(7);
    const tally = { bothRefuse: 0, bothAccept: 0, disagree: 0 };
    for (let i = 0; i < 1500; i++) {
      const block = Array.from(new HpackEncoder().encode(fieldsOf(r)));
      const roll = r.next();
      if (roll < 0.3) block[r.int(block.length)] = r.int(256);
      else if (roll < 0.5) block.length = r.int(block.length);
      else if (roll < 0.65)
        block.splice(r.int(block.length + 1), 0, ...Array.from({ length: 1 + r.int(6) }, () => r.int(256)));
      else if (roll < 0.8)
        block.unshift(...[0x20 | r.int(32), ...(r.next() < 0.5 ? [0x3f, r.int(256), r.int(128)] : [])]);
      else if (roll < 0.9)
        block.splice(
          r.int(block.length),
          0,
          ...[0xff, ...Array.from({ length: r.int(12) }, () => 0x80 | r.int(128)), r.int(128)],
        );
      else {
        const at = r.int(block.length);
        block[at] = (block[at] ?? 0) ^ (1 << r.int(8));
      }
      const bytes = Uint8Array.from(block);
      const id = await openAll(4096);
      const theirs = (await Promise.all(peers.map((p) => p.decode(id, bytes)))).map(fieldsFrom);
      let ours: HeaderField[] | undefined;
      try {
        ours = new HpackDecoder().decode(bytes);
      } catch (e) {
        if (e instanceof HeaderListTooLarge) throw e;
        ours = undefined;
      }
      const hexed = Buffer.from(bytes).toString("hex");
      if (theirs.every((t) => t === undefined)) {
        tally.bothRefuse++;
        expect({ block: hexed, ours }).toEqual({ block: hexed, ours: undefined });
      } else if (theirs.every((t) => t !== undefined) && Bun.deepEquals(theirs[0], theirs[1])) {
        tally.bothAccept++;
        expect({ block: hexed, ours }).toEqual({ block: hexed, ours: theirs[0] });
      } else tally.disagree++;
    }
    // The cases must exercise both sides of the rule.
    expect(tally.bothRefuse).toBeGreaterThan(200);
    expect(tally.bothAccept).toBeGreaterThan(200);
    console.log(`mutated blocks: ${JSON.stringify(tally)}`);
  }, 120_000);
});
