/**
 * The witness (docs/notary.md, "Witnesses"): takes a notary's checkpoint with the consistency proof from
 * the one it holds, as C2SP tlog-witness's add-checkpoint does, and cosigns it only when the log still
 * extends what it holds. A smaller checkpoint (a cut log) or one that does not extend it (a forked or
 * rewritten log) is never cosigned: it is logged at error level, counted, kept as evidence, and the log is
 * refused from then on until an operator decides (`svc notary witness --resume` or `--forget`). What is
 * held is on disk before anything is cosigned; a cosignature is always of what is held.
 */
import type { AddCheckpoint } from "../../lib/notary-objects/add-checkpoint.ts";
import { checkpointOrigin, noteSignature, verifyCheckpoint } from "../../lib/notary-objects/checkpoint.ts";
import { CLOCK_SKEW_S, signCosignature } from "../../lib/notary-objects/cosignature.ts";
import { signerFor, unverifiedClaims } from "../../lib/notary-objects/jws.ts";
import { equalHashes, verifyConsistency } from "../../lib/notary-objects/merkle.ts";
import type { SvidSource } from "../../lib/spiffe/x509-source.ts";
import type { Logger } from "../log.ts";
import type { HeldCheckpoint, WitnessStore } from "./store.ts";

/** How a checkpoint was taken: the label of svc_proxy_witness_checkpoints_total. */
export type WitnessResult =
  | "cosigned"
  | "stale"
  | "old"
  | "invalid"
  | "unknown_log"
  | "forbidden"
  | "cut"
  | "inconsistent"
  | "refused";

/** What add() answers: an HTTP status, a body, and the cosignature when it cosigned. */
interface AddOutcome {
  status: number;
  result: WitnessResult;
  /** The cosignature line(s) for 200, the held size for 409, else the reason. */
  body: string;
  contentType: string;
  cosignature?: string;
}

interface Verdict {
  result: WitnessResult;
  reason: string;
  held: HeldCheckpoint | undefined;
}

export interface WitnessDeps {
  store: WitnessStore;
  source: SvidSource;
  /** The SPIFFE IDs of the notaries whose logs this witness follows. */
  logs: readonly string[];
  log: Logger;
  count?: (log: string, result: WitnessResult) => void;
}

export class Witness {
  private readonly logs: Set<string>;

  constructor(private readonly d: WitnessDeps) {
    this.logs = new Set(d.logs);
  }

  /**
   * A checkpoint `note` of a log with its JWS tree head, sent as `req` says (the size the sender believes
   * is held, and the consistency proof from it). `from` is the SPIFFE ID it came from: the caller that
   * pushed it, or the log the witness polled. Only the log gives its own checkpoints.
   */
  async add(req: AddCheckpoint, treeHead: string, from: string): Promise<AddOutcome> {
    let c: Awaited<ReturnType<typeof verifyCheckpoint>>;
    try {
      c = await verifyCheckpoint(req.note, treeHead, this.d.source.bundles());
    } catch (e) {
      return this.outcome("unknown", 403, "invalid", (e as Error).message);
    }
    // A tree head dated ahead of this witness's clock would make every later one look older than it.
    if (c.head.claims.iat > Date.now() / 1000 + CLOCK_SKEW_S)
      return this.outcome(
        c.head.issuer.uri,
        403,
        "invalid",
        `the tree head is dated ${new Date(c.head.claims.iat * 1000).toISOString()}, ahead of this witness's clock by more than ${CLOCK_SKEW_S} s`,
      );
    const logId = c.head.issuer.uri;
    // Before the logs followed are looked at: no one but a log learns whether it is followed.
    if (from !== logId)
      return this.outcome(
        logId,
        403,
        "forbidden",
        `${from} may not give the checkpoints of ${logId}: only the log itself does`,
      );
    if (!this.logs.has(logId))
      return this.outcome(logId, 404, "unknown_log", `this witness does not follow the log of ${logId}`);
    const root = new Uint8Array(Buffer.from(c.root, "base64url"));
    const sent = {
      oldSize: req.old,
      proof: req.proof.map((h) => Buffer.from(h).toString("base64")).join("\n"),
      note: req.note,
      treeHead,
    };
    const accept = { origin: c.origin, size: c.size, root, note: req.note, treeHead };
    const verdict = this.d.store.decide<Verdict>(c.origin, (held) => {
      const as = (result: WitnessResult, reason = "") => ({ result, reason, held });
      const refuse = (result: "cut" | "inconsistent", reason: string) => ({
        refuse: { origin: c.origin, reason, ...sent },
        result: as(result, reason),
      });
      if (held?.refused) return { result: as("refused", held.refused) };
      if (req.old !== (held?.size ?? 0)) return { result: as("stale") };
      if (!held) return { accept, result: as("cosigned") };
      if (c.size === held.size)
        return equalHashes(root, held.root)
          ? { result: as("cosigned") }
          : refuse(
              "inconsistent",
              `the log signed a checkpoint of ${c.size} leaves with another root than the one held: two logs under one name (forked), or rewritten`,
            );
      if (c.size < held.size)
        // Signed no earlier than the larger one held: the log went back. Signed before it: an old
        // checkpoint sent again, which proves nothing (and is not cosigned).
        return c.head.claims.iat >= unverifiedClaims<{ iat: number }>(held.treeHead).iat
          ? refuse(
              "cut",
              `the log signed a checkpoint of ${c.size} leaves after one of ${held.size}: it lost records (cut, or restored from an old backup)`,
            )
          : { result: as("old") };
      if (!verifyConsistency(held.size, c.size, req.proof, held.root, root))
        return refuse(
          "inconsistent",
          `the log of ${c.size} leaves does not extend the checkpoint of ${held.size} leaves held (the consistency proof does not verify): forked or rewritten`,
        );
      return { accept, result: as("cosigned") };
    });
    const fields = { log: logId, size: c.size, held: verdict.held?.size ?? 0 };
    switch (verdict.result) {
      case "stale":
        return this.outcome(logId, 409, "stale", `${verdict.held?.size ?? 0}\n`, "text/x.tlog.size");
      case "old":
        this.d.log.warn("witness: an older checkpoint sent again, not taken", fields);
        return this.outcome(
          logId,
          400,
          "old",
          `the checkpoint of ${c.size} leaves is older than the one of ${verdict.held?.size} leaves held`,
        );
      case "refused":
        this.d.log.warn("witness: a checkpoint of a refused log, not taken", {
          ...fields,
          reason: verdict.reason,
          since: verdict.held?.refusedAt?.toISOString(),
        });
        return this.outcome(
          logId,
          403,
          "refused",
          `this witness refuses the log of ${logId} since ${verdict.held?.refusedAt?.toISOString()}: ${verdict.reason}`,
        );
      case "cut":
      case "inconsistent":
        this.d.log.error("witness: checkpoint refused; the log is refused until an operator acts", {
          ...fields,
          reason: verdict.reason,
          database: this.d.store.path,
        });
        return this.outcome(logId, verdict.result === "cut" ? 400 : 422, verdict.result, verdict.reason);
      default: {
        const cosigned = await this.cosign(logId, c.text, c.size, root);
        if (c.size !== verdict.held?.size)
          this.d.log.info("witness: checkpoint cosigned", { log: logId, size: c.size, root: c.root });
        this.d.count?.(logId, "cosigned");
        return {
          status: 200,
          result: "cosigned",
          body: cosigned.line,
          contentType: "text/plain; charset=utf-8",
          cosignature: cosigned.jws,
        };
      }
    }
  }

  /** The held checkpoint of the log with this origin, cosigned now; undefined when none is held. */
  async cosigned(
    origin: string,
  ): Promise<(HeldCheckpoint & { cosigned: string; cosignature: string }) | undefined> {
    const held = this.d.store.held(origin);
    // Only logs it follows: one dropped from witness.logs is not vouched for any more.
    if (!held || !this.logs.has(`spiffe://${origin}`)) return undefined;
    const text = held.note.slice(0, held.note.lastIndexOf("\n\n") + 1);
    const c = await this.cosign(`spiffe://${origin}`, text, held.size, held.root);
    return { ...held, cosigned: `${held.note}${c.line}`, cosignature: c.jws };
  }

  /** A cosignature of `text` (size, root) with the witness's SVID now: a note line and a JWS. */
  private async cosign(logId: string, text: string, size: number, root: Uint8Array) {
    const svid = this.d.source.getX509Svid();
    const signer = signerFor(svid);
    return {
      line: noteSignature(text, checkpointOrigin(svid.id.uri), signer.key),
      jws: await signCosignature(svid.id.uri, logId, size, root, signer),
    };
  }

  private outcome(
    log: string,
    status: number,
    result: WitnessResult,
    body: string,
    contentType = "text/plain; charset=utf-8",
  ): AddOutcome {
    // Only the logs this witness follows are labels: any workload can send a checkpoint.
    this.d.count?.(this.logs.has(log) ? log : "unknown", result);
    return { status, result, body: body.endsWith("\n") ? body : `${body}\n`, contentType };
  }
}
