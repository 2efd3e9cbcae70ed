/**
 * HPACK decoding time against input size (lib/http2/hpack.ts): for header blocks a peer could send to
 * make a decoder work hard, the CPU time to decode a block of N octets and of 2N, so that the ratio shows
 * the time is linear in the input (about 2) rather than worse. Blocks: indexed fields by the thousand,
 * one long Huffman string of the longest codes, literals that churn the dynamic table, and size updates
 * before one field. Medians of --rounds, alternating sizes. No peers.
 *
 *   bun bench/hpack.ts [--kib 64] [--rounds 9] [--list-kib 64] [--out bench/results/hpack.md]
 *
 * --list-kib is the decoder's header list limit (0: none).
 */
import { parseArgs } from "node:util";
import { HpackDecoder, integer } from "../lib/http2/hpack.ts";
import { median, range } from "./stats.ts";

const { values: o } = parseArgs({
  options: {
    kib: { type: "string", default: "64" },
    rounds: { type: "string", default: "9" },
    "list-kib": { type: "string", default: "64" },
    out: { type: "string" },
  },
});
const N = Number(o.kib) * 1024;
const LIST_LIMIT = Number(o["list-kib"]) * 1024 || Number.POSITIVE_INFINITY;

const families: Record<string, (size: number) => Uint8Array> = {
  "indexed fields (0x82 each)": (size) => new Uint8Array(size).fill(0x82),
  "one Huffman string of 30-bit codes": (size) => {
    // Octet 0x0a is coded in 30 bits: all ones but the last two, so bytes of 0xff with a valid end.
    const out: number[] = [0x00];
    integer(out, 0x80, 7, 1); // name "a" as Huffman (5 bits + padding)
    out.push(0x1f);
    const length = size - 16;
    integer(out, 0x80, 7, length);
    // Code 0x3ffffffc (30 bits) four times is 15 octets: repeat the pattern, then pad with ones.
    const four = [0xff, 0xff, 0xff, 0xf3, 0xff, 0xff, 0xff, 0xcf, 0xff, 0xff, 0xff, 0x3f, 0xff, 0xff, 0xfc];
    for (let i = 0; i < length; i++) out.push(four[i % 15] as number);
    return Uint8Array.from(out);
  },
  "literals churning the dynamic table": (size) => {
    const out: number[] = [];
    for (let i = 0; out.length < size; i++) {
      out.push(0x40);
      integer(out, 0, 7, 8);
      out.push(...Buffer.from(`x-${String(i % 100000).padStart(6, "0")}`));
      integer(out, 0, 7, 40);
      out.push(...Buffer.alloc(40, 0x61));
    }
    return Uint8Array.from(out);
  },
  "table size updates, then one field": (size) => {
    const out: number[] = [];
    while (out.length < size - 1) integer(out, 0x20, 5, 4096);
    out.push(0x82);
    return Uint8Array.from(out);
  },
};

/**
 * CPU µs to decode `block` `times` times, each with a fresh decoder limited, as a relay is, to header
 * lists of --list-kib: past it the block is still read to its end (the table must stay in step), but no more
 * fields are kept.
 */
function cpu(block: Uint8Array, times: number): number {
  const before = process.cpuUsage();
  for (let i = 0; i < times; i++) {
    try {
      new HpackDecoder({ maxHeaderListSize: LIST_LIMIT }).decode(block);
    } catch {
      // A block over the list limit is refused at its end: the work is done all the same.
    }
  }
  const d = process.cpuUsage(before);
  return (d.user + d.system) / times;
}

const lines = [
  "# HPACK decoding time against input size (bench/hpack.ts)",
  "",
  `${new Date().toISOString().slice(0, 10)}; CPU µs to decode one block of ${N / 1024} KiB and of ${(2 * N) / 1024} KiB, header lists limited to ${LIST_LIMIT === Number.POSITIVE_INFINITY ? "nothing" : `${LIST_LIMIT / 1024} KiB`}; medians of ${o.rounds} alternating rounds (range); 2N ÷ N near 2 is linear.`,
  "",
  `| block | ${N / 1024} KiB µs | ${(2 * N) / 1024} KiB µs | 2N ÷ N |`,
  "|---|---:|---:|---:|",
];
for (const [name, make] of Object.entries(families)) {
  const small = make(N);
  const large = make(2 * N);
  cpu(small, 20); // warm-up
  cpu(large, 20);
  const a: number[] = [];
  const b: number[] = [];
  for (let r = 0; r < Number(o.rounds); r++) {
    a.push(cpu(small, 20));
    b.push(cpu(large, 20));
  }
  lines.push(
    `| ${name} | ${median(a).toFixed(0)} (${range(a, 0)}) | ${median(b).toFixed(0)} (${range(b, 0)}) | ${(median(b) / median(a)).toFixed(2)} |`,
  );
}
const report = `${lines.join("\n")}\n`;
process.stdout.write(report);
if (o.out) await Bun.write(o.out, report);
