import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import fc from "fast-check";
import {
  append,
  consistencyPath,
  EMPTY_ROOT,
  type Frontier,
  frontierFits,
  type Hash,
  inclusionPath,
  leafHash,
  nodeHash,
  rootAt,
  rootOf,
  type StoredNode,
  verifyConsistency,
  verifyInclusion,
} from "../../lib/notary-objects/merkle.ts";

/** RFC 9162's definition, written out directly: the reference the incremental tree must agree with. */
function mth(leaves: Uint8Array[]): Uint8Array {
  const h = (...p: Uint8Array[]) => {
    const x = createHash("sha256");
    for (const b of p) x.update(b);
    return new Uint8Array(x.digest());
  };
  if (leaves.length === 0) return h();
  if (leaves.length === 1) return h(Uint8Array.of(0), leaves[0] as Uint8Array);
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return h(Uint8Array.of(1), mth(leaves.slice(0, k)), mth(leaves.slice(k)));
}

const data = (i: number) => new TextEncoder().encode(`record ${i}`);

/** A tree built by append, with every stored node kept for proofs. */
function build(n: number) {
  let frontier: Frontier = [];
  const leaves: Hash[] = [];
  const nodes = new Map<string, Hash>();
  const roots: Hash[] = [rootOf(frontier)];
  for (let i = 0; i < n; i++) {
    const leaf = leafHash(data(i));
    leaves.push(leaf);
    const r = append(frontier, i, leaf);
    frontier = r.frontier;
    for (const node of r.nodes as StoredNode[]) nodes.set(`${node.level}/${node.index}`, node.hash);
    roots.push(rootOf(frontier));
  }
  const read = async (level: number, index: number) => {
    const h = level === 0 ? leaves[index] : nodes.get(`${level}/${index}`);
    if (!h) throw new Error(`no node ${level}/${index}`);
    return h;
  };
  return { frontier, roots, read, leaves };
}

describe("the notary log's Merkle tree", () => {
  test("the incremental root equals RFC 9162's MTH for every size up to 70", () => {
    const { roots } = build(70);
    expect(roots[0]).toEqual(EMPTY_ROOT);
    for (let n = 0; n <= 70; n++) expect(roots[n]).toEqual(mth(Array.from({ length: n }, (_, i) => data(i))));
  });

  test("the right edge has one subtree per set bit of the size", () => {
    for (const n of [0, 1, 2, 3, 7, 8, 13, 64]) {
      const { frontier } = build(n);
      expect(frontierFits(frontier, n)).toBe(true);
      expect(frontierFits(frontier, n + 1)).toBe(false);
    }
  });

  test("every leaf of every tree up to 33 leaves has a proof that verifies, and only at its own place", async () => {
    const { read, roots, leaves } = build(33);
    for (let n = 1; n <= 33; n++)
      for (let m = 0; m < n; m++) {
        const path = await inclusionPath(read, m, n);
        const root = roots[n] as Hash;
        const leaf = leaves[m] as Hash;
        expect(verifyInclusion(leaf, m, n, path, root)).toBe(true);
        if (n > 1) expect(verifyInclusion(leaf, (m + 1) % n, n, path, root)).toBe(false);
        expect(verifyInclusion(leafHash(data(m + 1000)), m, n, path, root)).toBe(false);
      }
  });

  test("a proof fails for a size of another shape, a flipped bit, a cut or padded path, or an index past the end", async () => {
    const { read, roots, leaves } = build(21);
    const leaf = leaves[5] as Hash;
    const root = roots[21] as Hash;
    const path = await inclusionPath(read, 5, 21);
    expect(verifyInclusion(leaf, 5, 21, path, root)).toBe(true);
    // A size whose tree has another shape on the leaf's way up (the signed tree head binds size and root).
    expect(verifyInclusion(leaf, 5, 16, path, root)).toBe(false);
    expect(verifyInclusion(leaf, 5, 40, path, root)).toBe(false);
    const flipped = path.map((p, i) => (i === 1 ? p.map((b, j) => (j === 0 ? b ^ 1 : b)) : p));
    expect(verifyInclusion(leaf, 5, 21, flipped, root)).toBe(false);
    expect(verifyInclusion(leaf, 5, 21, path.slice(0, -1), root)).toBe(false);
    expect(verifyInclusion(leaf, 5, 21, [...path, path[0] as Hash], root)).toBe(false);
    expect(verifyInclusion(leaf, 21, 21, path, root)).toBe(false);
    expect(verifyInclusion(leaf, -1, 21, path, root)).toBe(false);
    expect(verifyInclusion(leaf, 5.5, 21, path, root)).toBe(false);
    expect(verifyInclusion(leaf, 5, 21, [...path.slice(0, -1), new Uint8Array(31)], root)).toBe(false);
    await expect(inclusionPath(read, 21, 21)).rejects.toThrow("not in a tree of 21");
  });

  test("a node cannot pass for a leaf: the two-leaf root is not the leaf hash of the two hashes", () => {
    const a = leafHash(data(0));
    const b = leafHash(data(1));
    const root = nodeHash(a, b);
    const forged = new Uint8Array([...a, ...b]);
    expect(verifyInclusion(leafHash(forged), 0, 1, [], root)).toBe(false);
  });

  test("a proof in a big tree needs only the logarithm of its size in nodes", async () => {
    const { read } = build(1000);
    expect((await inclusionPath(read, 999, 1000)).length).toBeLessThanOrEqual(10);
    expect((await inclusionPath(read, 0, 1000)).length).toBe(10);
  });

  test("property: a proof verifies only for its own leaf, index, size and root; any changed byte, hash, index or size fails", async () => {
    const { read, roots, leaves } = build(130);
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 130 }),
        fc.nat(),
        fc.nat(),
        fc.nat(),
        fc.integer({ min: 1, max: 255 }),
        fc.integer({ min: -3, max: 3 }).filter((d) => d !== 0),
        async (n, m0, which, at, xor, shift) => {
          const m = m0 % n;
          const path = await inclusionPath(read, m, n);
          const root = roots[n] as Hash;
          const leaf = leaves[m] as Hash;
          expect(verifyInclusion(leaf, m, n, path, root)).toBe(true);
          if (path.length > 0) {
            const i = which % path.length;
            const flipped = path.map((p, k) =>
              k === i ? p.map((b, j) => (j === at % 32 ? b ^ xor : b)) : p,
            );
            expect(verifyInclusion(leaf, m, n, flipped, root)).toBe(false);
          }
          const otherLeaf = leaves[(m + 1) % 130] as Hash;
          if (n > 1) expect(verifyInclusion(otherLeaf, m, n, path, root)).toBe(false);
          expect(verifyInclusion(leaf, m + shift, n, path, root)).toBe(false);
          expect(verifyInclusion(leaf, m, n, path, roots[(n % 130) + 1] as Hash)).toBe(false);
        },
      ),
      { numRuns: 400, seed: 7 },
    );
  });
});

/** RFC 9162 2.1.4.1's SUBPROOF, written out over the records: the reference for consistency proofs. */
function subproof(m: number, leaves: Uint8Array[], whole: boolean): Uint8Array[] {
  const n = leaves.length;
  if (m === n) return whole ? [] : [mth(leaves)];
  let k = 1;
  while (k * 2 < n) k *= 2;
  if (m <= k) return [...subproof(m, leaves.slice(0, k), whole), mth(leaves.slice(k))];
  return [...subproof(m - k, leaves.slice(k), false), mth(leaves.slice(0, k))];
}

describe("consistency proofs (RFC 9162 2.1.4)", () => {
  const N = 64;
  const { read, roots } = build(300);
  const records = Array.from({ length: 300 }, (_, i) => data(i));

  test("between every pair of sizes up to 64: the path is the RFC's SUBPROOF, and it verifies", async () => {
    for (let to = 0; to <= N; to++) {
      expect(await rootAt(read, to)).toEqual(roots[to] as Hash);
      for (let from = 0; from <= to; from++) {
        const path = await consistencyPath(read, from, to);
        const want = from === 0 ? [] : subproof(from, records.slice(0, to), true);
        expect(path).toEqual(want);
        expect(verifyConsistency(from, to, path, roots[from] as Hash, roots[to] as Hash)).toBe(true);
      }
    }
  });

  test("between every pair up to 64, a proof that is not exactly right is refused", async () => {
    const flip = (h: Hash, at: number) => h.map((b, j) => (j === at ? b ^ 1 : b));
    for (let to = 1; to <= N; to++)
      for (let from = 1; from < to; from++) {
        const path = await consistencyPath(read, from, to);
        const [a, b] = [roots[from] as Hash, roots[to] as Hash];
        for (let i = 0; i < path.length; i++) {
          const changed = path.map((p, k) => (k === i ? flip(p, (from + i) % 32) : p));
          expect(verifyConsistency(from, to, changed, a, b)).toBe(false);
        }
        expect(verifyConsistency(from, to, path.slice(1), a, b)).toBe(false);
        expect(verifyConsistency(from, to, path.slice(0, -1), a, b)).toBe(false);
        expect(verifyConsistency(from, to, [...path, roots[1] as Hash], a, b)).toBe(false);
        expect(verifyConsistency(from, to, [], a, b)).toBe(false);
        expect(verifyConsistency(from, to, path, flip(a, 0), b)).toBe(false);
        expect(verifyConsistency(from, to, path, a, flip(b, 31))).toBe(false);
        // The same path read as another pair of sizes, or with the roots of another pair.
        if (from > 1) expect(verifyConsistency(from - 1, to, path, roots[from - 1] as Hash, b)).toBe(false);
        if (to < N) expect(verifyConsistency(from, to + 1, path, a, roots[to + 1] as Hash)).toBe(false);
        expect(verifyConsistency(to, from, path, b, a)).toBe(false);
        expect(verifyConsistency(from, to, [...path.slice(0, -1), new Uint8Array(31)], a, b)).toBe(false);
      }
    // Equal sizes: only the empty path and equal roots; from 0: only the empty path.
    expect(verifyConsistency(5, 5, [], roots[5] as Hash, roots[5] as Hash)).toBe(true);
    expect(verifyConsistency(5, 5, [], roots[5] as Hash, roots[6] as Hash)).toBe(false);
    expect(verifyConsistency(5, 5, [roots[1] as Hash], roots[5] as Hash, roots[5] as Hash)).toBe(false);
    expect(verifyConsistency(0, 9, [], EMPTY_ROOT, roots[9] as Hash)).toBe(true);
    expect(verifyConsistency(0, 9, [roots[1] as Hash], EMPTY_ROOT, roots[9] as Hash)).toBe(false);
    for (const [from, to] of [
      [-1, 3],
      [3, 2],
      [1.5, 3],
      [1, Number.MAX_SAFE_INTEGER + 2],
      [Number.NaN, 3],
    ])
      expect(verifyConsistency(from as number, to as number, [], EMPTY_ROOT, EMPTY_ROOT)).toBe(false);
    await expect(consistencyPath(read, 4, 3)).rejects.toThrow("no consistency proof");
  });

  test("property: random pairs of sizes up to 300 against the reference, and a forked tree is refused", async () => {
    // The fork: the same first records but record `at` changed, so that every tree over it differs.
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 300 }), fc.nat(), fc.nat(), async (to, f, at) => {
        const from = 1 + (f % to);
        const path = await consistencyPath(read, from, to);
        expect(path).toEqual(subproof(from, records.slice(0, to), true));
        expect(verifyConsistency(from, to, path, roots[from] as Hash, roots[to] as Hash)).toBe(true);
        const forked = records.slice(0, to).map((r, i) => (i === at % to ? data(-1) : r));
        const forkedTo = mth(forked);
        const forkedFrom = mth(forked.slice(0, from));
        // A proof of the honest log does not tie its old root to the forked log's new one, nor the
        // forked log's old root (when the change is in it) to the honest new one.
        expect(verifyConsistency(from, to, path, roots[from] as Hash, forkedTo)).toBe(false);
        if (at % to < from)
          expect(verifyConsistency(from, to, path, forkedFrom, roots[to] as Hash)).toBe(false);
      }),
      { numRuns: 300, seed: 11 },
    );
  });
});
