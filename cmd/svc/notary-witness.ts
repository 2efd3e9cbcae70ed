import { defineCommand } from "citty";
import { SvcError } from "../../lib/errors.ts";
import { checkpointOrigin } from "../../lib/notary-objects/checkpoint.ts";
import { say } from "../say.ts";
import { action, checkOutput } from "./cli.ts";

const args = {
  database: { type: "string", description: "The witness's SQLite file (witness.database)", required: true },
  resume: {
    type: "string",
    description:
      "Serve the log of this notary (SPIFFE ID or origin) again after a refusal; it must still extend the checkpoint held",
  },
  forget: {
    type: "string",
    description:
      "Forget the checkpoint held for this notary (SPIFFE ID or origin): its next checkpoint is taken as the first; the evidence is kept",
  },
  output: { type: "string", alias: "o", description: "Output format: json" },
} as const;

/**
 * `svc notary witness`: what a witness holds (docs/notary.md, "Witnesses"): each log's checkpoint, the
 * logs it refuses and why, the evidence of each refusal; and the operator's two decisions after a cut or
 * fork, --resume and --forget. Safe while the witness runs (SQLite WAL; it reads the file on every
 * checkpoint).
 */
export const witnessCommand = defineCommand({
  meta: {
    name: "witness",
    description: "Shows what a witness holds and refuses; --resume or --forget a refused log",
  },
  args,
  run: action(args, async (a) => {
    checkOutput(a.output, ["json"]);
    if (a.resume !== undefined && a.forget !== undefined)
      throw new SvcError("usage", "--resume and --forget are two different decisions: give one");
    const { WitnessStore } = await import("../../proxy/witness/store.ts");
    const store = WitnessStore.open(a.database, "--database", true);
    try {
      const name = a.resume ?? a.forget;
      if (name !== undefined) {
        const origin = checkpointOrigin(name);
        const done = a.resume !== undefined ? store.resume(origin) : store.forget(origin);
        if (!done)
          throw new SvcError(
            "usage",
            `${a.database} holds no checkpoint of ${origin} (it holds: ${
              store
                .logs()
                .map((l) => l.origin)
                .join(", ") || "none"
            })`,
          );
        say(
          "svc notary witness",
          "success",
          a.resume !== undefined
            ? `${origin}: refusal lifted; its next checkpoint must still extend the one of ${store.held(origin)?.size} leaves held`
            : `${origin}: checkpoint forgotten; its next checkpoint is taken as the first (the evidence is kept)`,
        );
        return;
      }
      const logs = store.logs().map((l) => ({
        origin: l.origin,
        size: l.size,
        root: Buffer.from(l.root).toString("base64"),
        updatedAt: l.updatedAt.toISOString(),
        ...(l.refused ? { refused: l.refused, refusedAt: l.refusedAt?.toISOString() } : {}),
      }));
      const evidence = store.evidence().map((e) => ({
        origin: e.origin,
        receivedAt: e.receivedAt.toISOString(),
        reason: e.reason,
        heldSize: e.heldSize,
        heldCheckpoint: e.heldNote,
        oldSize: e.oldSize,
        proof: e.proof ? e.proof.split("\n") : [],
        checkpoint: e.note,
        treeHead: e.treeHead,
      }));
      if (a.output === "json") {
        process.stdout.write(`${JSON.stringify({ logs, evidence }, null, 2)}\n`);
        return;
      }
      if (logs.length === 0) process.stdout.write("No checkpoint held yet.\n");
      for (const l of logs)
        process.stdout.write(
          `${l.origin}: ${l.size} leaves (root ${l.root}), since ${l.updatedAt}${l.refused ? `\n  REFUSED since ${l.refusedAt}: ${l.refused}` : ""}\n`,
        );
      for (const e of evidence)
        process.stdout.write(
          `evidence ${e.receivedAt} ${e.origin}: held ${e.heldSize} leaves, sent ${e.checkpoint.split("\n")[1]} leaves: ${e.reason}\n`,
        );
    } finally {
      store.close();
    }
  }),
});
