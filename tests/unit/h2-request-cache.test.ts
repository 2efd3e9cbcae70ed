import { describe, expect, test } from "bun:test";
import {
  type HeaderField,
  HeaderListTooLarge,
  HpackDecoder,
  HpackEncoder,
  HpackError,
} from "../../lib/http2/hpack.ts";
import { callerH2Fields } from "../../proxy/http/h2-fields.ts";
import { RequestCache } from "../../proxy/http/h2relay/request-cache.ts";

/**
 * The HTTP/2 relay's cache of the last request head (proxy/http/h2relay/request-cache.ts). What the target
 * receives through the cache must be what it receives without it, block for block: the same fields, the
 * same request IDs, the same refusals, with both HPACK tables in step. Each test runs one caller's blocks
 * through two relays, one with the cache and one decoding, checking and encoding every block, and
 * compares what a target decodes from each.
 */
const LIMIT = 1024;
const ID = "x-request-id";
const BASE: HeaderField[] = [
  { name: ":method", value: "POST" },
  { name: ":scheme", value: "https" },
  { name: ":authority", value: "api" },
  { name: ":path", value: "/pkg.Service/Method" },
  { name: "content-type", value: "application/grpc" },
  { name: "te", value: "trailers" },
];

type Outcome = HeaderField[] | "too large" | "malformed" | "compression error";

/** One relay's caller side, as connection.ts runs a request head (the cache used or not). */
function relay(cached: boolean) {
  const decoder = new HpackDecoder({ maxHeaderListSize: LIMIT });
  const encoder = new HpackEncoder({ literalNames: new Set([ID]) });
  const cache = new RequestCache(decoder, encoder, LIMIT);
  const target = new HpackDecoder();
  let ids = 0;
  const newRequestId = (): HeaderField => ({ name: ID, value: `new-${ids++}` });
  let hits = 0;
  const pass = (block: Uint8Array): Outcome => {
    try {
      return run(block);
    } catch (e) {
      if (e instanceof HpackError) return "compression error";
      throw e;
    }
  };
  const run = (bytes: Uint8Array): Outcome => {
    // The block as the relay reads it: where it arrived, among other frames' octets.
    const src = Buffer.concat([Buffer.from([0x82, 0x40, 0x3f]), bytes, Buffer.from([0xbe, 0x00])]);
    const block = { src, start: 3, end: 3 + bytes.length };
    const decoderBefore = decoder.changes;
    let fields: HeaderField[] | undefined;
    let lastFieldAt = -1;
    const looked = cached ? cache.get(block) : undefined;
    if (looked && "tooLarge" in looked) return "too large";
    let out: Uint8Array;
    let requestId: HeaderField;
    let contentLength: number;
    if (looked && "kept" in looked) {
      hits++;
      out = looked.kept.out;
      contentLength = looked.kept.contentLength;
      requestId = looked.requestId ?? newRequestId();
    } else {
      if (looked) fields = looked.fields;
      else
        try {
          fields = decoder.decode(src, block.start, block.end);
          lastFieldAt = decoder.lastFieldAt;
        } catch (e) {
          if (e instanceof HeaderListTooLarge) return "too large";
          throw e;
        }
      const policy = callerH2Fields(fields, {
        peer: "spiffe://t/p",
        newRequestId,
        remoteAddress: "10.0.0.1",
      });
      if ("malformed" in policy) return "malformed";
      const encoderBefore = encoder.changes;
      out = encoder.encode(policy.fields);
      requestId = policy.requestId;
      contentLength = policy.contentLength;
      if (lastFieldAt >= 0)
        cache.set(block, fields, lastFieldAt, decoderBefore, encoderBefore, {
          out,
          method: "",
          path: "",
          contentLength,
        });
    }
    const tail = encoder.encodeLiteral(requestId);
    // What the relay holds the body to is part of the outcome: the cache must give the same.
    return [
      ...target.decode(Buffer.concat([out, tail])),
      { name: "(content length held to)", value: String(contentLength) },
    ];
  };
  return { pass, hits: () => hits };
}

/** A deterministic pseudo-random sequence (a test that fails can be run again alike). */
function random(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    return s / 2 ** 31;
  };
}

/**
 * Runs `blocks` through a relay with the cache and one without; both targets must get the same. Returns
 * how many blocks the cache served, and what each block came to.
 */
function same(blocks: Uint8Array[]): { hits: number; outcomes: Outcome[] } {
  const withCache = relay(true);
  const without = relay(false);
  const outcomes: Outcome[] = [];
  for (const [i, block] of blocks.entries()) {
    const got = withCache.pass(block);
    expect({ i, got }).toEqual({ i, got: without.pass(block) });
    outcomes.push(got);
  }
  return { hits: withCache.hits(), outcomes };
}

describe("the relay's request head cache", () => {
  test("a caller that sends every call alike is served from the cache, each with a new request ID", () => {
    const caller = new HpackEncoder();
    const blocks = Array.from({ length: 5 }, () => caller.encode(BASE));
    expect(same(blocks).hits).toBe(3); // the first two change the tables (literals, then indexed entries)
  });

  test("a caller's own X-Request-Id at the end of the block is carried, whatever its value or form", () => {
    const caller = new HpackEncoder({ literalNames: new Set([ID]) });
    const blocks = Array.from({ length: 6 }, (_, i) =>
      caller.encode([...BASE, { name: ID, value: `caller-${i}`, never: i % 2 === 1 }]),
    );
    // and one without an ID after them, one with two IDs (the first is the request's), one with the ID
    // followed by a field the caller indexes (the table changes: decoded, not served from the cache)
    blocks.push(caller.encode(BASE));
    blocks.push(caller.encode([...BASE, { name: ID, value: "first" }, { name: ID, value: "second" }]));
    blocks.push(caller.encode([...BASE, { name: ID, value: "x" }, { name: "x-new", value: "1" }]));
    blocks.push(caller.encode([...BASE, { name: ID, value: "after" }]));
    expect(same(blocks).hits).toBeGreaterThanOrEqual(5);
  });

  test("a caller's X-Request-Id anywhere else in the block is carried too, also when served from the cache", () => {
    for (const literalNames of [new Set<string>(), new Set([ID])]) {
      const caller = new HpackEncoder({ literalNames });
      const head = [...BASE.slice(0, 4), { name: ID, value: "the caller's" }, ...BASE.slice(4)];
      const blocks = Array.from({ length: 5 }, () => caller.encode(head));
      // and two IDs, the first in the middle: the first is the request's
      blocks.push(...[0, 1, 2].map((i) => caller.encode([...head, { name: ID, value: `later-${i}` }])));
      const { outcomes } = same(blocks);
      for (const o of outcomes)
        expect(Array.isArray(o) && o.filter((f) => f.name === ID)).toEqual([
          { name: ID, value: "the caller's" },
        ]);
    }
  });

  test("a caller that indexes the same X-Request-Id at the end of every block is served from the cache", () => {
    const caller = new HpackEncoder();
    const blocks = Array.from({ length: 6 }, () => caller.encode([...BASE, { name: ID, value: "same" }]));
    const { hits, outcomes } = same(blocks);
    expect(hits).toBe(4);
    for (const o of outcomes)
      expect(Array.isArray(o) && o.filter((f) => f.name === ID)).toEqual([{ name: ID, value: "same" }]);
  });

  test("a header list over the limit is refused, by the cache as without it", () => {
    const caller = new HpackEncoder({ literalNames: new Set([ID]) });
    const blocks = [0, 1, 2].map((i) => caller.encode([...BASE, { name: ID, value: `id-${i}` }]));
    // an ID over the limit alone, and one under it alone but over it with the fields before it
    blocks.push(caller.encode([...BASE, { name: ID, value: "y".repeat(LIMIT) }]));
    blocks.push(caller.encode([...BASE, { name: ID, value: "z".repeat(LIMIT - 200) }]));
    blocks.push(caller.encode([...BASE, { name: ID, value: "ok" }]));
    const { hits, outcomes } = same(blocks);
    expect(hits).toBeGreaterThanOrEqual(2);
    expect(outcomes.slice(3, 5)).toEqual(["too large", "too large"]);
  });

  test("the same octets replayed after the caller's table changed are decoded again", () => {
    // A caller (or an attacker) may send octets a past block had, once its indexes mean other entries.
    const caller = new HpackEncoder();
    const blocks = [0, 1, 2].map(() => caller.encode(BASE));
    const replayed = blocks[2] as Uint8Array;
    // a malformed request (which the relay refuses, its own table unchanged), then a field the relay's
    // encoder does not index, then one it does
    blocks.push(caller.encode([...BASE, { name: "connection", value: "close" }]));
    blocks.push(replayed, replayed);
    blocks.push(caller.encode([...BASE, { name: ID, value: "indexed by the caller" }]));
    blocks.push(replayed, replayed);
    blocks.push(caller.encode([...BASE.slice(0, 4), { name: "x-new", value: "shifts every index" }]));
    blocks.push(replayed, replayed);
    expect(same(blocks).hits).toBeGreaterThanOrEqual(1);
  });

  test("a caller's X-Request-Id with a character a value may not hold is refused, by the cache as without it", () => {
    const caller = new HpackEncoder({ literalNames: new Set([ID]) });
    const blocks = [0, 1, 2].map((i) => caller.encode([...BASE, { name: ID, value: `id-${i}` }]));
    blocks.push(caller.encode([...BASE, { name: ID, value: "a\r\nx-injected: 1" }]));
    blocks.push(caller.encode([...BASE, { name: ID, value: "trailing space " }]));
    blocks.push(caller.encode([...BASE, { name: ID, value: "fine" }]));
    const { hits, outcomes } = same(blocks);
    expect(outcomes.slice(3, 5)).toEqual(["malformed", "malformed"]);
    expect(hits).toBe(2);
  });

  test("a table size update after the kept octets is the error it is in a whole block", () => {
    const caller = new HpackEncoder({ literalNames: new Set([ID]) });
    const blocks = [0, 1, 2].map((i) => caller.encode([...BASE, { name: ID, value: `id-${i}` }]));
    const prefix = caller.encode(BASE);
    blocks.push(prefix, Buffer.concat([prefix, Uint8Array.of(0x3f, 0xe1, 0x1f)]));
    expect(same(blocks).outcomes.at(-1)).toBe("compression error");
  });

  test("random callers: the cache never changes what the target gets", () => {
    const next = random(7);
    const pick = <T>(xs: T[]): T => xs[Math.floor(next() * xs.length)] as T;
    const extras: HeaderField[] = [
      { name: "grpc-timeout", value: "1S" },
      { name: "x-tenant", value: "a" },
      { name: "x-tenant", value: "b" },
      { name: "svc-peer-id", value: "spiffe://forged" },
      { name: "connection", value: "close" },
      { name: "X-Upper", value: "1" },
      { name: ID, value: "inner" },
      { name: "content-length", value: "5" },
      { name: "content-length", value: "12" },
      { name: "content-length", value: "x" },
    ];
    for (let run = 0; run < 20; run++) {
      const caller = new HpackEncoder({ literalNames: next() < 0.5 ? new Set([ID]) : new Set() });
      const blocks: Uint8Array[] = [];
      for (let i = 0; i < 40; i++) {
        const fields = [...BASE];
        if (next() < 0.2) fields.push(pick(extras));
        if (next() < 0.5) fields.push({ name: ID, value: `r${run}-${i}`, never: next() < 0.2 });
        if (next() < 0.05) caller.setPeerMaxTableSize(pick([0, 64, 4096]));
        blocks.push(caller.encode(fields));
      }
      same(blocks);
    }
  });
});
