import { describe, expect, test } from "bun:test";
import { type HeaderField, HpackDecoder, HpackEncoder } from "../../lib/http2/hpack.ts";
import { BlockCache } from "../../proxy/http/h2relay/block-cache.ts";

/**
 * The HTTP/2 relay's cache of the last response head (proxy/http/h2relay/block-cache.ts): a block is
 * served from it only while neither HPACK table has changed since it was kept, and a block whose
 * decoding or encoding changed a table is never kept; so a cached answer is always what decoding and
 * encoding would give.
 */
const HEAD: HeaderField[] = [
  { name: ":status", value: "200" },
  { name: "content-type", value: "application/grpc" },
];

function relay() {
  const target = new HpackEncoder(); // the target's encoder: what it sends
  const decoder = new HpackDecoder(); // the proxy's, for what the target sends
  const encoder = new HpackEncoder(); // the proxy's, toward the caller
  const cache = new BlockCache<number>(decoder, encoder);
  /** One block through the relay, as connection.ts passes a response head on. */
  const pass = (bytes: Uint8Array): { out: Uint8Array; cached: boolean } => {
    // The block as the relay reads it: where it arrived, among other frames' octets.
    const src = Buffer.concat([Buffer.from([0x88, 0x40]), bytes, Buffer.from([0xbf])]);
    const block = { src, start: 2, end: 2 + bytes.length };
    const hit = cache.get(block);
    if (hit) return { out: hit.out, cached: true };
    const d = decoder.changes;
    const fields = decoder.decode(src, block.start, block.end);
    const e = encoder.changes;
    const out = encoder.encode(fields);
    cache.set(block, d, e, out, 200);
    return { out, cached: false };
  };
  return { target, decoder, encoder, pass };
}

describe("the relay's header block cache", () => {
  test("kept only once neither table changes, then served as encoding would give it", () => {
    const r = relay();
    // 1st: the target's literal enters the decoder's table, and the encoder's: not kept; 2nd: indexed on
    // both sides, nothing changes, so it is kept; 3rd and 4th: served from the cache.
    const results = [1, 2, 3, 4].map(() => r.pass(r.target.encode(HEAD)));
    expect(results.map((x) => x.cached)).toEqual([false, false, true, true]);
    const fresh = new HpackEncoder();
    fresh.encode(HEAD);
    expect(Array.from(results[3]?.out ?? [])).toEqual(Array.from(fresh.encode(HEAD)));
  });

  test("a change to the decoder's table since, or to the encoder's, is a miss", () => {
    const r = relay();
    for (let i = 0; i < 3; i++) r.pass(r.target.encode(HEAD));
    const block = r.target.encode(HEAD);
    expect(r.pass(block).cached).toBe(true);
    // Another block adds an entry to the decoder's table (and to the encoder's).
    r.pass(
      r.target.encode([
        { name: ":status", value: "200" },
        { name: "x-new", value: "1" },
      ]),
    );
    expect(r.pass(block).cached).toBe(false);
    expect(r.pass(block).cached).toBe(true);
    // A table size the caller announces: the encoder owes a size update, so nothing is served.
    r.encoder.setPeerMaxTableSize(1024);
    const after = r.pass(block);
    expect(after.cached).toBe(false);
    expect(after.out[0]).toBe(0x3f); // the table size update (1024) opens the block
  });

  test("the same length but other octets is a miss", () => {
    const r = relay();
    for (let i = 0; i < 3; i++) r.pass(r.target.encode(HEAD));
    const block = r.target.encode(HEAD);
    expect(r.pass(block).cached).toBe(true);
    const other = r.target.encode([
      { name: ":status", value: "204" },
      { name: "content-type", value: "application/grpc" },
    ]);
    expect(other.length).toBe(block.length);
    expect(r.pass(other).cached).toBe(false);
    expect(r.decoder.decode(other)[0]?.value).toBe("204");
  });

  test("a block that adds to the table each time it comes is never served from the cache", () => {
    const r = relay();
    // A target that sends the head as a new literal each time, added to the table each time (the same
    // octets): skipping one decoding would leave the proxy's table behind the target's.
    const block = new HpackEncoder().encode(HEAD);
    const cached = [1, 2, 3, 4].map(() => r.pass(block).cached);
    expect(cached).toEqual([false, false, false, false]);
    expect(r.decoder.tableSize).toBe(4 * (12 + 16 + 32));
  });
});
