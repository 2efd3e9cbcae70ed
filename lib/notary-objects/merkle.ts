/**
 * The notary log's Merkle tree, as Certificate Transparency defines it (RFC 9162 2.1): SHA-256, leaves
 * hashed as H(0x00 || data) and interior nodes as H(0x01 || left || right), so that no leaf can pass for
 * a node. Sizes and indexes are JavaScript numbers (exact to 2^53), shifted by arithmetic, not by 32-bit
 * bit operators.
 */
import { createHash } from "node:crypto";

export type Hash = Uint8Array;

const sha256 = (...parts: Uint8Array[]): Hash => {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
};

export const EMPTY_ROOT: Hash = sha256();

export function leafHash(data: Uint8Array): Hash {
  return sha256(Uint8Array.of(0), data);
}

export function nodeHash(left: Hash, right: Hash): Hash {
  return sha256(Uint8Array.of(1), left, right);
}

export function equalHashes(a: Hash, b: Hash): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** The largest power of two smaller than n (n ≥ 2). */
function split(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

const isPowerOfTwo = (n: number) => n >= 1 && 2 ** Math.round(Math.log2(n)) === n;

/** A complete subtree on the tree's right edge: 2^level leaves. */
export interface FrontierNode {
  level: number;
  hash: Hash;
}

/** The right edge of a tree of `size` leaves: one complete subtree per set bit of size, largest first. */
export type Frontier = FrontierNode[];

/** A complete subtree to store: level ≥ 1, index counted in subtrees of its level from the left. */
export interface StoredNode {
  level: number;
  index: number;
  hash: Hash;
}

/**
 * Appends leaf number `size` (its leaf hash) to the tree whose right edge is `frontier`. Returns the new
 * right edge and the complete subtrees the append finished (the ones to store for proofs).
 */
export function append(
  frontier: Frontier,
  size: number,
  leaf: Hash,
): { frontier: Frontier; nodes: StoredNode[] } {
  const next = frontier.slice();
  const nodes: StoredNode[] = [];
  let carry: FrontierNode = { level: 0, hash: leaf };
  while (next.length > 0 && next[next.length - 1]?.level === carry.level) {
    const left = next.pop() as FrontierNode;
    const level = carry.level + 1;
    carry = { level, hash: nodeHash(left.hash, carry.hash) };
    nodes.push({ level, index: (size + 1) / 2 ** level - 1, hash: carry.hash });
  }
  next.push(carry);
  return { frontier: next, nodes };
}

/** The tree's root from its right edge: the subtrees folded from the right. */
export function rootOf(frontier: Frontier): Hash {
  if (frontier.length === 0) return EMPTY_ROOT;
  let acc = (frontier[frontier.length - 1] as FrontierNode).hash;
  for (let i = frontier.length - 2; i >= 0; i--) acc = nodeHash((frontier[i] as FrontierNode).hash, acc);
  return acc;
}

/** The frontier of a tree of `size` leaves must have one node per set bit of size, in that order. */
export function frontierFits(frontier: Frontier, size: number): boolean {
  const levels: number[] = [];
  for (let rest = size, level = 0; rest > 0; rest = Math.floor(rest / 2), level++)
    if (rest % 2 === 1) levels.unshift(level);
  return (
    levels.length === frontier.length &&
    levels.every((l, i) => frontier[i]?.level === l && frontier[i]?.hash.length === 32)
  );
}

/** Reads a stored complete subtree: level 0 is a leaf hash; index counts subtrees of that level. */
export type NodeReader = (level: number, index: number) => Promise<Hash>;

/** MTH(D[start:end]) from stored complete subtrees; the ranges the proofs ask for are always aligned. */
async function subtree(read: NodeReader, start: number, end: number): Promise<Hash> {
  const n = end - start;
  if (isPowerOfTwo(n) && start % n === 0) return read(Math.log2(n), start / n);
  const k = split(n);
  return nodeHash(await subtree(read, start, start + k), await subtree(read, start + k, end));
}

/** The audit path of leaf `index` in the tree of the first `size` leaves (RFC 9162 2.1.3.1), bottom first. */
export async function inclusionPath(read: NodeReader, index: number, size: number): Promise<Hash[]> {
  if (!Number.isSafeInteger(index) || !Number.isSafeInteger(size) || index < 0 || index >= size)
    throw new RangeError(`leaf ${index} is not in a tree of ${size}`);
  const path: Hash[] = [];
  let start = 0;
  let end = size;
  const siblings: [number, number][] = [];
  while (end - start > 1) {
    const k = split(end - start);
    if (index < start + k) {
      siblings.push([start + k, end]);
      end = start + k;
    } else {
      siblings.push([start, start + k]);
      start += k;
    }
  }
  for (const [a, b] of siblings.reverse()) path.push(await subtree(read, a, b));
  return path;
}

/** RFC 9162 2.1.3.2: does `path` prove leaf `leaf` at `index` in the tree of `size` with root `root`? */
export function verifyInclusion(
  leaf: Hash,
  index: number,
  size: number,
  path: readonly Hash[],
  root: Hash,
): boolean {
  if (!Number.isSafeInteger(index) || !Number.isSafeInteger(size) || index < 0 || index >= size) return false;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of path) {
    if (sn === 0 || p.length !== 32) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = nodeHash(p, r);
      if (fn % 2 === 0)
        while (fn % 2 === 0 && fn !== 0) {
          fn /= 2;
          sn = Math.floor(sn / 2);
        }
    } else {
      r = nodeHash(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && equalHashes(r, root);
}

/** The root of the tree of the first `size` leaves, from stored complete subtrees. */
export function rootAt(read: NodeReader, size: number): Promise<Hash> {
  return size === 0 ? Promise.resolve(EMPTY_ROOT) : subtree(read, 0, size);
}

/**
 * The consistency proof between the trees of the first `from` and the first `to` leaves (RFC 9162
 * 2.1.4.1, SUBPROOF written as a loop): the subtrees that, with the older root, make the newer one.
 * Empty when `from` is 0 (every tree extends the empty one) or equals `to`.
 */
export async function consistencyPath(read: NodeReader, from: number, to: number): Promise<Hash[]> {
  if (!Number.isSafeInteger(from) || !Number.isSafeInteger(to) || from < 0 || from > to)
    throw new RangeError(`no consistency proof from a tree of ${from} leaves to one of ${to}`);
  if (from === 0 || from === to) return [];
  // SUBPROOF(m, D[start:end], whole): each step down adds one subtree, after those of the steps below.
  const outer: [number, number][] = [];
  let m = from;
  let start = 0;
  let end = to;
  let whole = true;
  while (m < end - start) {
    const k = split(end - start);
    if (m <= k) {
      outer.push([start + k, end]);
      end = start + k;
    } else {
      outer.push([start, start + k]);
      m -= k;
      start += k;
      whole = false;
    }
  }
  const path: Hash[] = whole ? [] : [await subtree(read, start, end)];
  for (const [a, b] of outer.reverse()) path.push(await subtree(read, a, b));
  return path;
}

/**
 * RFC 9162 2.1.4.2: does `path` prove that the tree of `from` leaves with root `fromRoot` is the first
 * part of the tree of `to` leaves with root `toRoot`? From 0, only an empty path does; from `to`, only an
 * empty path and equal roots.
 */
export function verifyConsistency(
  from: number,
  to: number,
  path: readonly Hash[],
  fromRoot: Hash,
  toRoot: Hash,
): boolean {
  if (!Number.isSafeInteger(from) || !Number.isSafeInteger(to) || from < 0 || from > to) return false;
  if (from === 0) return path.length === 0;
  if (from === to) return path.length === 0 && equalHashes(fromRoot, toRoot);
  if (path.length === 0 || path.some((p) => p.length !== 32)) return false;
  const nodes = isPowerOfTwo(from) ? [fromRoot, ...path] : path;
  let fn = from - 1;
  let sn = to - 1;
  while (fn % 2 === 1) {
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  let fr = nodes[0] as Hash;
  let sr = fr;
  for (const c of nodes.slice(1)) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else sr = nodeHash(sr, c);
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && equalHashes(fr, fromRoot) && equalHashes(sr, toRoot);
}

/** A right edge as bytes for the database: per subtree, its level (one byte) and its hash. */
export function encodeFrontier(frontier: Frontier): Uint8Array {
  const out = new Uint8Array(frontier.length * 33);
  frontier.forEach((n, i) => {
    out[i * 33] = n.level;
    out.set(n.hash, i * 33 + 1);
  });
  return out;
}

export function decodeFrontier(bytes: Uint8Array): Frontier {
  if (bytes.length % 33 !== 0)
    throw new RangeError(`a stored right edge of ${bytes.length} bytes is not whole`);
  const out: Frontier = [];
  for (let i = 0; i < bytes.length; i += 33)
    out.push({ level: bytes[i] as number, hash: bytes.slice(i + 1, i + 33) });
  return out;
}
