/**
 * The notary log's consistency check (at start-up, and `svc notary verify --database`): every leaf in
 * order with no gap, every record still hashing to its leaf, no record outside the log, the log's head
 * matching its leaves, and every kept tree head matching the tree of its size and, when `bundles` are
 * given, signed by a notary they trust. Returns the problems found, each naming the record; none means
 * consistent. (The proxy checks no signatures at start-up: a tree head signed under an authority since
 * rotated out of the bundle is not a fault of the log; it checks the one it serves instead.)
 */
import { b64u, verifyTreeHead } from "../../lib/notary-objects/log.ts";
import { append, equalHashes, type Frontier, leafHash, rootOf } from "../../lib/notary-objects/merkle.ts";
import type { BundleSource } from "../../lib/spiffe/bundle.ts";
import type { NotaryStore } from "./store.ts";

export interface LogCheck {
  size: number;
  treeHeads: number;
  problems: string[];
}

const BATCH = 1000;
/** Enough to say what is wrong without flooding a log line. */
const MAX_PROBLEMS = 100;

export async function checkLog(store: NotaryStore, bundles: BundleSource | undefined): Promise<LogCheck> {
  const problems: string[] = [];
  const report = (p: string) => {
    if (problems.length < MAX_PROBLEMS) problems.push(p);
    else if (problems.length === MAX_PROBLEMS) problems.push("… and more");
  };
  const heads = await store.treeHeads();
  const headAt = new Map(heads.map((h) => [h.size, h]));
  if (bundles)
    for (const h of heads) {
      try {
        const v = await verifyTreeHead(h.jws, bundles);
        if (v.claims.size !== h.size || v.claims.root !== b64u(h.root))
          report(`tree head of size ${h.size}: its signed size or root is not the one stored beside it`);
      } catch (e) {
        report(`tree head of size ${h.size}: ${(e as Error).message}`);
      }
    }

  let frontier: Frontier = [];
  let size = 0;
  for (;;) {
    const batch = await store.leaves(size, BATCH);
    for (const leaf of batch) {
      const what = `leaf ${leaf.index} (${leaf.kind} ${leaf.ref})`;
      if (leaf.index !== size) {
        report(`leaves ${size} to ${leaf.index - 1} are missing (deleted from the log)`);
        // The tree cannot be rebuilt past a gap: heads beyond it are unverifiable.
        return { size, treeHeads: heads.length, problems };
      }
      if (!leaf.data) report(`${what}: the record is missing (deleted)`);
      else if (!equalHashes(leafHash(leaf.data), leaf.hash))
        report(`${what}: the record does not hash to its leaf (changed after it was logged)`);
      frontier = append(frontier, size, leaf.hash).frontier;
      size++;
      const head = headAt.get(size);
      if (head && !equalHashes(rootOf(frontier), head.root))
        report(`tree head of size ${size}: the leaves do not hash to its root (the log was changed)`);
    }
    if (batch.length < BATCH) break;
  }
  let current: { size: number; root: Uint8Array };
  try {
    current = await store.head();
  } catch (e) {
    report((e as Error).message);
    return { size, treeHeads: heads.length, problems };
  }
  if (current.size !== size)
    report(`the log's head counts ${current.size} leaves, ${size} are stored (leaves were deleted or added)`);
  else if (!equalHashes(current.root, rootOf(frontier)))
    report("the log's head does not match its leaves (the log was changed)");
  for (const h of heads)
    if (h.size > size)
      report(`tree head of size ${h.size}: the log has only ${size} leaves (leaves were deleted)`);
  for (const r of await store.unlogged())
    report(`${r.kind} ${r.ref}: stored but not in the log (written around the notary)`);
  return { size, treeHeads: heads.length, problems };
}
