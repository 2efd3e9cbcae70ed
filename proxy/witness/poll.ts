/**
 * The witness polling the notaries it follows (docs/notary.md, "Witnesses"): every `pollMs`, each log with
 * a URL is asked for its checkpoint (`GET /.svc/log/checkpoint` on its notary-query listener, over SPIFFE
 * mTLS with the notary's SPIFFE ID required) and, when it grew, for the consistency proof from the
 * checkpoint held; both go through the same add() as a push. A notary that cannot be reached is tried again
 * at the next poll; one that no longer has the tree head held gives no proof, and its checkpoint is
 * refused as not consistent.
 */
import { checkpointOrigin, MAX_NOTE_BYTES } from "../../lib/notary-objects/checkpoint.ts";
import { authorizeExactly } from "../../lib/spiffe/authorizer.ts";
import type { SvidSource } from "../../lib/spiffe/x509-source.ts";
import { exchange } from "../../lib/tls/exchange.ts";
import type { Logger } from "../log.ts";
import type { WitnessStore } from "./store.ts";
import type { Witness } from "./witness.ts";

/** A consistency proof's JSON: 63 hashes at most, two tree heads. */
const MAX_PROOF_BYTES = 256 * 1024;

export function startPolling(
  witness: Witness,
  store: WitnessStore,
  logs: readonly { spiffeId: string; url: URL | undefined }[],
  source: SvidSource,
  pollMs: number,
  log: Logger,
): { close(): void } {
  const timers = new Set<ReturnType<typeof setTimeout>>();
  let closed = false;
  for (const l of logs) {
    if (!l.url) continue;
    const url = l.url;
    const failures = { last: "" };
    const round = async () => {
      try {
        await pollOnce(witness, store, l.spiffeId, url, source, log);
        failures.last = "";
      } catch (e) {
        // Said once until it changes: a notary down for an hour is one line, not 120.
        const message = (e as Error).message;
        if (message !== failures.last)
          log.warn("witness: cannot poll the log", { log: l.spiffeId, url: url.href, error: message });
        failures.last = message;
      }
      if (closed) return;
      const t = setTimeout(() => {
        timers.delete(t);
        void round();
      }, pollMs);
      timers.add(t);
    };
    void round();
  }
  return {
    close() {
      closed = true;
      for (const t of timers) clearTimeout(t);
    },
  };
}

async function pollOnce(
  witness: Witness,
  store: WitnessStore,
  logId: string,
  base: URL,
  source: SvidSource,
  log: Logger,
): Promise<void> {
  const get = async (path: string, limit: number) => {
    const r = await exchange(new URL(path, base), {
      method: "GET",
      headers: {},
      source,
      authorize: authorizeExactly(logId),
      maxBodyBytes: limit,
      deadlineMs: 30_000,
    });
    return { ...r, text: new TextDecoder().decode(r.body) };
  };
  // What is held is read first: a push that lands while the log is asked then makes this a 409 (the
  // witness holds another size), never a smaller checkpoint measured against the larger one pushed.
  const old = store.held(checkpointOrigin(logId))?.size ?? 0;
  const c = await get("/.svc/log/checkpoint", MAX_NOTE_BYTES);
  const treeHead = c.headers["svc-tree-head"];
  if (c.status !== 200 || typeof treeHead !== "string")
    throw new Error(`the checkpoint route answered ${c.status}: ${c.text.slice(0, 200).trim()}`);
  const size = Number(c.text.split("\n")[1]);
  let proof: Uint8Array[] = [];
  if (old > 0 && Number.isSafeInteger(size) && size > old) {
    const p = await get(`/.svc/log/consistency?from=${old}&to=${size}`, MAX_PROOF_BYTES);
    if (p.status === 200) {
      const path = (JSON.parse(p.text) as { path?: unknown }).path;
      if (Array.isArray(path)) proof = path.map((h) => new Uint8Array(Buffer.from(String(h), "base64url")));
    } else if (p.status === 404)
      // The notary no longer has the tree head held: its checkpoint cannot be shown to extend it.
      log.warn("witness: the log gives no consistency proof from the checkpoint held", {
        log: logId,
        from: old,
        to: size,
        answer: p.text.slice(0, 200).trim(),
      });
    else throw new Error(`the consistency route answered ${p.status}: ${p.text.slice(0, 200).trim()}`);
  }
  // The checkpoint must be the polled log's own: another log's, handed over by this one, is refused.
  await witness.add({ old, proof, note: c.text }, treeHead, logId);
}
