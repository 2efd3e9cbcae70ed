/**
 * A receipt's place in the notary log, as `svc curl` and `svc notary verify` check it: its inclusion proof
 * against a signed tree head, and, with a witness policy (`--witness ID`, repeatable, and
 * `--witness-threshold N`), that enough of those witnesses cosigned that tree head (docs/notary.md,
 * "Witnesses").
 */
import { SvcError } from "../../lib/errors.ts";
import type { WitnessPolicy } from "../../lib/notary-objects/cosignature.ts";
import type { InclusionProof } from "../../lib/notary-objects/log.ts";
import type { BundleSource } from "../../lib/spiffe/bundle.ts";
import { parseSpiffeId } from "../../lib/spiffe/id.ts";
import { repeated } from "./cli.ts";

export const witnessArgs = {
  witness: {
    type: "string",
    description: "SPIFFE ID of a witness whose cosignature of the receipt's tree head counts (repeatable)",
  },
  "witness-threshold": {
    type: "string",
    description: "How many of the --witness IDs must have cosigned [default: all of them]",
  },
} as const;

/** The witness policy of the command line; undefined without --witness. */
export function witnessPolicy(rawArgs: string[], threshold: string | undefined): WitnessPolicy | undefined {
  const ids = repeated(rawArgs, ["--witness"]);
  if (ids.length === 0) {
    if (threshold !== undefined)
      throw new SvcError("usage", "--witness-threshold goes with --witness: name the witnesses that count");
    return undefined;
  }
  const witnesses: string[] = [];
  for (const id of ids) {
    let uri: string;
    try {
      uri = parseSpiffeId(id).uri;
    } catch (e) {
      throw new SvcError("usage", `--witness ${JSON.stringify(id)}: ${(e as Error).message}`);
    }
    if (witnesses.includes(uri)) throw new SvcError("usage", `--witness ${uri} is given twice`);
    witnesses.push(uri);
  }
  const n = threshold === undefined ? witnesses.length : Number(threshold);
  if (!/^[1-9][0-9]*$/.test(threshold ?? String(n)) || n > witnesses.length)
    throw new SvcError(
      "usage",
      `--witness-threshold ${JSON.stringify(threshold)}: expected a whole number from 1 to ${witnesses.length} (the number of --witness IDs)`,
    );
  return { witnesses, threshold: n };
}

/**
 * Checks a receipt's inclusion proof (JSON text) and, with a policy, the tree head's cosignatures.
 * Throws SvcError("receipt") naming what does not hold, SvcError("usage") for text that is not JSON.
 */
export async function checkInLog(
  receiptJws: string,
  receiptId: string,
  text: string,
  bundles: BundleSource,
  policy: WitnessPolicy | undefined,
  what = "--proof",
) {
  let proof: InclusionProof;
  try {
    proof = JSON.parse(text);
  } catch (e) {
    throw new SvcError("usage", `${what}: not JSON (${(e as Error).message})`);
  }
  if (proof?.receiptId !== receiptId)
    throw new SvcError(
      "receipt",
      `inclusion proof verification failed: the proof is for receipt ${JSON.stringify(proof?.receiptId)}, not ${receiptId}`,
    );
  const { verifyReceiptInclusion } = await import("../../lib/notary-objects/log.ts");
  const head = await verifyReceiptInclusion(receiptJws, proof, bundles);
  const cosignedBy = policy
    ? await (await import("../../lib/notary-objects/cosignature.ts")).checkWitnessed(
        head,
        proof.cosignatures,
        policy,
        bundles,
      )
    : undefined;
  return {
    leafIndex: proof.leafIndex,
    treeSize: proof.treeSize,
    signedBy: head.issuer.uri,
    signedAt: new Date(head.claims.iat * 1000).toISOString(),
    ...(cosignedBy ? { cosignedBy } : {}),
  };
}

/** The sentence that says where the receipt is in the log, and who cosigned it. */
export const inLogText = (l: Awaited<ReturnType<typeof checkInLog>>) =>
  `In the notary log: leaf ${l.leafIndex} of ${l.treeSize}, tree head signed by ${l.signedBy} at ${l.signedAt}${l.cosignedBy ? `, cosigned by ${l.cosignedBy.join(", ")}` : ""}\n`;
