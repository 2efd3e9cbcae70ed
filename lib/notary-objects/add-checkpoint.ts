/**
 * The body of a witness's add-checkpoint request, as C2SP tlog-witness writes it (docs/notary.md,
 * "Witnesses"): `old <size>` (the size the sender believes the witness holds), the consistency proof from
 * that size to the checkpoint's (one base64 hash per line), a blank line, then the checkpoint note.
 */
import { SvcError } from "../errors.ts";
import { MAX_NOTE_BYTES, treeSize } from "./checkpoint.ts";
import type { Hash } from "./merkle.ts";

/** The route on a listener with the witness middleware (tlog-witness's `<prefix>/add-checkpoint`). */
export const ADD_CHECKPOINT_PATH = "/.svc/witness/add-checkpoint";

/** A consistency proof of a tree of up to 2^63 leaves has at most this many hashes. */
const MAX_PROOF = 63;
export const MAX_ADD_CHECKPOINT_BYTES = MAX_NOTE_BYTES + 64 + MAX_PROOF * 45;

export function addCheckpointBody(old: number, proof: readonly Hash[], note: string): string {
  const lines = [`old ${old}`, ...proof.map((h) => Buffer.from(h).toString("base64"))];
  return `${lines.join("\n")}\n\n${note}`;
}

export interface AddCheckpoint {
  /** The size the sender believes the witness holds. */
  old: number;
  /** The consistency proof from `old` to the checkpoint's size. */
  proof: Hash[];
  note: string;
}

/** The request read strictly; throws SvcError("usage") naming what is malformed. */
export function parseAddCheckpoint(body: string): AddCheckpoint {
  const bad = (why: string) => new SvcError("usage", `add-checkpoint: ${why}`);
  const split = body.indexOf("\n\n");
  if (split < 0) throw bad("no blank line between the old size and proof, and the checkpoint");
  const lines = body.slice(0, split).split("\n");
  const first = lines[0] as string;
  const old = first.startsWith("old ") ? treeSize(first.slice(4)) : undefined;
  if (old === undefined)
    throw bad(`the first line ${JSON.stringify(first.slice(0, 40))} is not "old <size>"`);
  if (lines.length - 1 > MAX_PROOF) throw bad(`more than ${MAX_PROOF} proof hashes`);
  const proof = lines.slice(1).map((line, i) => {
    const h = Buffer.from(line, "base64");
    if (h.length !== 32 || h.toString("base64") !== line)
      throw bad(`proof line ${i + 1} is not a base64 SHA-256 hash`);
    return new Uint8Array(h);
  });
  return { old, proof, note: body.slice(split + 2) };
}
