/**
 * The notary pushing its checkpoints to its witnesses (docs/notary.md, "Witnesses"), off the request path:
 * a round starts `intervalMs` after the log grows (rounds never overlap), signs one checkpoint of the log
 * as it is, and sends it to each witness with the consistency proof from the size that witness holds, as
 * C2SP tlog-witness's add-checkpoint does. A 409 names the size the witness holds: the push is made again
 * from there (a replica may have pushed a larger checkpoint: then a new one is signed). A log smaller than
 * what a witness holds is pushed all the same, so that the witness sees the cut. Each cosignature is
 * checked (the witness's SPIFFE ID, this log, this size and root) and kept with the tree head, for
 * inclusion proofs asked with `?witnessed=N`.
 */
import { ADD_CHECKPOINT_PATH, addCheckpointBody } from "../../lib/notary-objects/add-checkpoint.ts";
import { treeSize } from "../../lib/notary-objects/checkpoint.ts";
import { CLOCK_SKEW_S, verifyCosignature } from "../../lib/notary-objects/cosignature.ts";
import { b64u } from "../../lib/notary-objects/log.ts";
import { consistencyPath, type Hash } from "../../lib/notary-objects/merkle.ts";
import { type Authorizer, authorizeExactly } from "../../lib/spiffe/authorizer.ts";
import { Backoff } from "../../lib/spiffe/backoff.ts";
import type { SvidSource } from "../../lib/spiffe/x509-source.ts";
import { exchange } from "../../lib/tls/exchange.ts";
import type { WitnessPeer } from "../config/types.ts";
import type { Logger } from "../log.ts";
import type { Notary } from "./notary.ts";

type PushResult = "cosigned" | "refused" | "failed";

export interface PusherDeps {
  notary: Notary;
  witnesses: readonly WitnessPeer[];
  source: SvidSource;
  log: Logger;
  intervalMs: number;
  count?: (witness: string, result: PushResult) => void;
}

/** A checkpoint as signed by the notary, its root in base64url (as cosignatures carry it). */
interface Checkpoint {
  note: string;
  treeHead: string;
  size: number;
  root: string;
  signedAt: number;
}

/**
 * How long one push may take: a witness that does not answer holds up the round (rounds never overlap),
 * and an inclusion proof asked with ?witnessed=N waits at most 10 s for a round.
 */
const PUSH_DEADLINE_MS = 5_000;

/** The largest answer a witness gives: a few signature lines, or a size. */
const MAX_ANSWER = 64 * 1024;

export class WitnessPusher {
  /** The checkpoint each witness holds (size, base64url root), as it last cosigned. */
  private readonly held = new Map<string, { size: number; root: string }>();
  private running: Promise<void> | undefined;
  private queued: Promise<void> | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly backoff = new Backoff(1000, 60_000);
  private closed = false;

  /** Each witness must answer as itself. */
  private readonly authorizers: Map<string, Authorizer>;

  constructor(private readonly d: PusherDeps) {
    this.authorizers = new Map(d.witnesses.map((w) => [w.spiffeId, authorizeExactly(w.spiffeId)]));
  }

  /** The log grew: a round starts within intervalMs, or after the one running. */
  poke(delayMs = this.d.intervalMs): void {
    if (this.closed || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, delayMs);
  }

  /**
   * Resolves when a round that started after this call has ended: the log as it is now was pushed.
   * Callers that come while a round waits to start share it.
   */
  flush(): Promise<void> {
    if (this.queued) return this.queued;
    const after = this.running ?? Promise.resolve();
    this.queued = after.then(async () => {
      this.queued = undefined;
      if (this.closed) return;
      this.running = this.round().finally(() => {
        this.running = undefined;
      });
      await this.running;
    });
    return this.queued;
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
  }

  private async round(): Promise<void> {
    let checkpoint: Checkpoint;
    try {
      // Every witness holds the log as it is, root and all: nothing to sign (each checkpoint keeps a
      // tree head). A log regrown to a held size under another root is pushed: that is a fork to see.
      const now = await this.d.notary.store.head();
      const root = b64u(now.root);
      if (this.d.witnesses.every((w) => holds(this.held.get(w.spiffeId), now.size, root))) return;
      checkpoint = await this.sign();
    } catch (e) {
      // An empty log has nothing to push; a notary that refuses or cannot sign says so in its own log.
      this.d.log.debug("notary: no checkpoint to push", { reason: (e as Error).message });
      return;
    }
    const results = await Promise.all(this.d.witnesses.map((w) => this.push(w, checkpoint)));
    if (results.some((r) => r === "failed")) this.poke(this.backoff.delay());
    else this.backoff.reset();
  }

  private async sign(): Promise<Checkpoint> {
    const c = await this.d.notary.checkpoint(this.self());
    return { ...c, root: b64u(c.root) };
  }

  private self(): string {
    return this.d.source.getX509Svid().id.uri;
  }

  private async push(w: WitnessPeer, first: Checkpoint): Promise<PushResult> {
    // This witness holds the log as it is already (another did not): nothing to send or count.
    if (holds(this.held.get(w.spiffeId), first.size, first.root)) return "cosigned";
    let c = first;
    let old = this.held.get(w.spiffeId)?.size ?? 0;
    const result = await (async (): Promise<PushResult> => {
      for (let attempt = 0; attempt < 3; attempt++) {
        const res = await exchange(new URL(ADD_CHECKPOINT_PATH, w.url), {
          method: "POST",
          headers: { "content-type": "text/plain; charset=utf-8", "svc-tree-head": c.treeHead },
          body: new TextEncoder().encode(addCheckpointBody(old, await this.proof(old, c.size), c.note)),
          source: this.d.source,
          authorize: this.authorizers.get(w.spiffeId),
          maxBodyBytes: MAX_ANSWER,
          timeoutMs: PUSH_DEADLINE_MS,
          deadlineMs: PUSH_DEADLINE_MS,
        });
        const text = new TextDecoder().decode(res.body).trim();
        const held = res.status === 409 ? treeSize(text) : undefined;
        if (held !== undefined) {
          old = held;
          // A replica of this notary may have pushed a larger checkpoint: sign the log as it is now.
          if (old > c.size) c = await this.sign();
          continue;
        }
        if (res.status !== 200) {
          const refused = res.status >= 400 && res.status < 500;
          (refused ? this.d.log.error : this.d.log.warn).call(
            this.d.log,
            refused ? "notary: a witness refused the checkpoint" : "notary: a witness did not cosign",
            { witness: w.spiffeId, size: c.size, held: old, status: res.status, answer: text.slice(0, 300) },
          );
          return refused ? "refused" : "failed";
        }
        await this.keep(w, c, res.headers["svc-cosignature"]);
        this.held.set(w.spiffeId, { size: c.size, root: c.root });
        return "cosigned";
      }
      this.d.log.warn("notary: a witness holds another size after three pushes", {
        witness: w.spiffeId,
        held: old,
      });
      return "failed";
    })().catch((e: Error) => {
      this.d.log.warn("notary: cannot push the checkpoint to a witness", {
        witness: w.spiffeId,
        error: e.message,
      });
      return "failed" as const;
    });
    this.d.count?.(w.spiffeId, result);
    return result;
  }

  /**
   * The consistency proof from `old` leaves to `size`, from the log's stored subtrees (none from 0, or when
   * the log is smaller than what the witness holds: the cut it must see). A log that is not the one the
   * witness held makes a proof that does not verify there, and is refused for it. A store that fails
   * ends the push, to be tried again.
   */
  private proof(old: number, size: number): Promise<Hash[]> {
    if (old === 0 || old >= size) return Promise.resolve([]);
    const store = this.d.notary.store;
    return consistencyPath((level, index) => store.node(level, index), old, size);
  }

  /** Checks a witness's cosignature and keeps it with the tree head it cosigns. */
  private async keep(w: WitnessPeer, c: Checkpoint, jws: unknown): Promise<void> {
    if (typeof jws !== "string") throw new Error("the witness answered 200 without a Svc-Cosignature");
    const cs = await verifyCosignature(jws, this.d.source.bundles());
    if (
      cs.issuer.uri !== w.spiffeId ||
      cs.log !== this.self() ||
      cs.claims.size !== c.size ||
      cs.claims.root !== c.root
    )
      throw new Error(
        `the witness's cosignature is by ${cs.issuer.uri} of ${cs.log} at ${cs.claims.size} leaves, not of this checkpoint`,
      );
    // Verifiers do not count a cosignature dated well before its tree head: say so where it can be fixed.
    if (cs.claims.iat + CLOCK_SKEW_S < c.signedAt)
      this.d.log.warn("notary: a witness's clock is behind: its cosignatures will not count", {
        witness: w.spiffeId,
        cosigned_at: cs.claims.iat,
        signed_at: c.signedAt,
      });
    await this.d.notary.store.putCosignature(c.size, w.spiffeId, jws);
  }
}

const holds = (held: { size: number; root: string } | undefined, size: number, root: string) =>
  held?.size === size && held.root === root;
