import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import fc from "fast-check";
import {
  append,
  EMPTY_ROOT,
  type Frontier,
  frontierFits,
  type Hash,
  inclusionPath,
  leafHash,
  nodeHash,
  rootOf,
  type StoredNode,
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
