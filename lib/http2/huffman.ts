/**
 * HPACK's Huffman coding of string literals (RFC 7541 section 5.2, code in Appendix B). Strings are
 * latin1 text, one character per octet, so that every octet a peer sends survives a decode and re-encode.
 *
 * Decoding reads four bits at a time through a table made from the code's binary tree at load (each
 * state is a node of the tree, and each entry says where four bits lead from it and which symbol they
 * finish, if any), in time linear in the input. It refuses what section 5.2 forbids: the EOS symbol
 * inside a string, and padding longer than 7 bits or not made of the most significant bits of EOS (all
 * ones).
 */
import { HUFFMAN_CODES, HUFFMAN_LENGTHS } from "./huffman-codes.ts";

const EOS = 256;

/**
 * The code's binary tree as two arrays: for node n, ZERO[n] and ONE[n] are its children; a child >= LEAF
 * is the leaf of symbol (child - LEAF). Node 0 is the root. Every node is also its bit depth and whether
 * the bits that lead to it are all ones (a node where a string may end: section 5.2's padding).
 */
const LEAF = 1 << 16;
const ZERO: number[] = [0];
const ONE: number[] = [0];
const DEPTH: number[] = [0];
const ALL_ONES: boolean[] = [true];
for (let symbol = 0; symbol <= EOS; symbol++) {
  const code = HUFFMAN_CODES[symbol] as number;
  const length = HUFFMAN_LENGTHS[symbol] as number;
  let node = 0;
  for (let bit = length - 1; bit >= 0; bit--) {
    const one = Math.floor(code / 2 ** bit) % 2 === 1;
    const children = one ? ONE : ZERO;
    if (bit === 0) children[node] = LEAF + symbol;
    else {
      let next = children[node] as number;
      if (!next) {
        next = ZERO.length;
        ZERO.push(0);
        ONE.push(0);
        DEPTH.push((DEPTH[node] as number) + 1);
        ALL_ONES.push((ALL_ONES[node] as boolean) && one);
        children[node] = next;
      }
      node = next;
    }
  }
}

/**
 * STEP[node * 16 + nibble]: the node four bits lead to from `node` (low 16 bits), plus EMITS and the
 * symbol (bits 16 to 23) when they finish one (at most one: the shortest code is 5 bits), or HOLDS_EOS.
 * Leaving a node whose symbol just ended for the root is part of the step.
 */
const EMITS = 1 << 24;
const HOLDS_EOS = 1 << 25;
const STEP = new Uint32Array(ZERO.length * 16);
for (let from = 0; from < ZERO.length; from++)
  for (let nibble = 0; nibble < 16; nibble++) {
    let node = from;
    let entry = 0;
    for (let bit = 3; bit >= 0; bit--) {
      const child = (((nibble >> bit) & 1) === 1 ? ONE : ZERO)[node] as number;
      if (child < LEAF) {
        node = child;
        continue;
      }
      const symbol = child - LEAF;
      if (symbol === EOS) {
        entry = HOLDS_EOS;
        break;
      }
      entry = EMITS | (symbol << 16);
      node = 0;
    }
    STEP[from * 16 + nibble] = entry | node;
  }

export class HuffmanError extends Error {}

/** Where an encoder writes octets: an array, or a buffer of its own. */
export interface Out {
  push(b: number): void;
}

/** Decodes `bytes[start, end)`; throws HuffmanError for EOS in the string or bad padding. */
export function huffmanDecode(bytes: Uint8Array, start: number, end: number): string {
  // The shortest code is 5 bits: at most 8 symbols for every 5 octets. Symbols go to a buffer kept for
  // the next string, read out as text at the end.
  const most = Math.ceil(((end - start) * 8) / 5);
  if (most > scratch.length) scratch = Buffer.allocUnsafeSlow(most);
  const out = scratch;
  let n = 0;
  let node = 0;
  for (let i = start; i < end; i++) {
    const byte = bytes[i] as number;
    let step = STEP[(node << 4) | (byte >> 4)] as number;
    if (step & HOLDS_EOS) throw new HuffmanError("a Huffman-coded string holds EOS");
    if (step & EMITS) out[n++] = (step >> 16) & 0xff;
    node = step & 0xffff;
    step = STEP[(node << 4) | (byte & 0xf)] as number;
    if (step & HOLDS_EOS) throw new HuffmanError("a Huffman-coded string holds EOS");
    if (step & EMITS) out[n++] = (step >> 16) & 0xff;
    node = step & 0xffff;
  }
  // The bits after the last symbol are its padding.
  if ((DEPTH[node] as number) > 7) throw new HuffmanError("Huffman padding longer than 7 bits");
  if (!ALL_ONES[node]) throw new HuffmanError("Huffman padding is not a prefix of EOS");
  return out.toString("latin1", 0, n);
}

let scratch = Buffer.allocUnsafeSlow(4096);

/** The length in octets of `s` (latin1) Huffman-coded. */
export function huffmanLength(s: string): number {
  let bits = 0;
  for (let i = 0; i < s.length; i++) bits += HUFFMAN_LENGTHS[s.charCodeAt(i) & 0xff] as number;
  return Math.ceil(bits / 8);
}

/** Appends `s` (latin1) Huffman-coded to `out`, padded with the most significant bits of EOS. */
export function huffmanEncode(s: string, out: Out): void {
  // Up to 7 bits waiting plus a code of up to 30: within a double's exact integers.
  let acc = 0;
  let bits = 0;
  for (let i = 0; i < s.length; i++) {
    const symbol = s.charCodeAt(i) & 0xff;
    const length = HUFFMAN_LENGTHS[symbol] as number;
    acc = acc * 2 ** length + (HUFFMAN_CODES[symbol] as number);
    bits += length;
    while (bits >= 8) {
      bits -= 8;
      const scale = 2 ** bits;
      const byte = Math.floor(acc / scale);
      out.push(byte);
      acc -= byte * scale;
    }
  }
  if (bits > 0) out.push(acc * 2 ** (8 - bits) + (2 ** (8 - bits) - 1));
}
