import { readFileSync } from "node:fs";
import { defineCommand } from "citty";
import { SvcError } from "../../lib/errors.ts";
import { say } from "../say.ts";
import { action, checkOutput } from "./cli.ts";
import { witnessCommand } from "./notary-witness.ts";
import { checkInLog, inLogText, witnessArgs, witnessPolicy } from "./receipt-in-log.ts";

const verifyArgs = {
  file: {
    type: "positional",
    description:
      "A saved statement or receipt: the compact JWS, a notary-query response (/.svc/workload/…, /.svc/receipt/…) or `svc curl -o json` output",
    required: false,
  },
  bundle: {
    type: "string",
    description: "Trust bundle: PEM certificates or a SPIFFE bundle (JWKS)",
    required: true,
  },
  "request-body": { type: "string", description: "File with the request body a receipt describes" },
  "response-body": { type: "string", description: "File with the response body a receipt describes" },
  proof: {
    type: "string",
    description:
      "The receipt's inclusion proof (GET /.svc/receipt/{id}/proof): checks it is in the notary log",
  },
  database: {
    type: "string",
    description: "Instead of FILE, check a whole notary log: an SQLite file or a postgres:// URL",
  },
  consistency: {
    type: "string",
    description:
      "Instead of FILE, a consistency proof (GET /.svc/log/consistency?from=N): checks that the log of N leaves is the first part of the later one",
  },
  "tree-head": {
    type: "string",
    description:
      "With --consistency (required): a tree head you kept (its JWS, an inclusion proof, or an earlier consistency proof); the proof must start at it",
  },
  ...witnessArgs,
  output: { type: "string", alias: "o", description: "Output format: json" },
} as const;

interface Saved {
  kind: "statement" | "receipt";
  jws: string;
  request?: Uint8Array;
  response?: Uint8Array;
}

/** Finds the JWS (and any bodies) in what the user saved. */
function parseSaved(text: string, file: string): Saved {
  const t = text.trim();
  if (!t.startsWith("{")) {
    const typ = (() => {
      try {
        return JSON.parse(Buffer.from(t.split(".")[0] ?? "", "base64url").toString()).typ as string;
      } catch {
        return undefined;
      }
    })();
    if (typ === "svc-receipt+jws") return { kind: "receipt", jws: t };
    if (typ === "svc-workload-statement+jws") return { kind: "statement", jws: t };
    throw new SvcError("usage", `${file}: not a workload statement or receipt (no svc typ in a JWS header)`);
  }
  const doc = JSON.parse(t);
  const b64 = (s: unknown) => (typeof s === "string" ? new Uint8Array(Buffer.from(s, "base64")) : undefined);
  const receipt = typeof doc.receipt === "string" ? doc.receipt : doc.receipt?.jws;
  if (receipt) {
    const request = b64(doc.request?.bodyBase64);
    const response = b64(doc.response?.bodyBase64);
    return {
      kind: "receipt",
      jws: receipt,
      ...(request ? { request } : {}),
      ...(response ? { response } : {}),
    };
  }
  const statement = typeof doc.statement === "string" ? doc.statement : doc.workload?.jws;
  if (statement) return { kind: "statement", jws: statement };
  throw new SvcError("usage", `${file}: JSON without a statement or receipt`);
}

const verify = defineCommand({
  meta: {
    name: "verify",
    description: "Verifies a saved workload statement or receipt offline against a trust bundle",
  },
  args: verifyArgs,
  run: action(verifyArgs, async (a, rawArgs) => {
    checkOutput(a.output, ["json"]);
    const policy = witnessPolicy(rawArgs, a["witness-threshold"]);
    if (policy && !a.proof)
      throw new SvcError(
        "usage",
        "--witness checks the cosignatures of an inclusion proof's tree head: give --proof",
      );
    const read = (f: string, flag: string) => {
      try {
        return readFileSync(f);
      } catch (e) {
        throw new SvcError("usage", `${flag} ${f}: cannot read it (${(e as NodeJS.ErrnoException).code})`);
      }
    };
    const { loadBundleFile } = await import("../../lib/spiffe/bundle-file.ts");
    if (a["tree-head"] !== undefined && a.consistency === undefined)
      throw new SvcError(
        "usage",
        "--tree-head goes with --consistency: it is the tree head the proof must start or end at",
      );
    if (a.consistency !== undefined) {
      if (a.file || a.proof || a.database !== undefined)
        throw new SvcError(
          "usage",
          "--consistency checks a consistency proof: give it without FILE, --proof and --database",
        );
      if (a["tree-head"] === undefined)
        throw new SvcError(
          "usage",
          "--consistency needs --tree-head: a tree head you kept, which the proof must start at (without one it shows nothing about the log you saw)",
        );
      const { checkConsistency } = await import("./notary-consistency.ts");
      return checkConsistency(
        read(a.consistency, "--consistency").toString("utf8"),
        read(a["tree-head"], "--tree-head").toString("utf8"),
        loadBundleFile(a.bundle),
        a.output === "json",
      );
    }
    if (a.database !== undefined) {
      if (a.file || a.proof)
        throw new SvcError("usage", "--database checks a whole log: give it without FILE and --proof");
      const { auditLog } = await import("./notary-audit.ts");
      return auditLog(a.database, loadBundleFile(a.bundle), a.output === "json");
    }
    if (!a.file)
      throw new SvcError(
        "usage",
        "FILE is required: a saved statement or receipt (or --database to check a log)",
      );
    const saved = parseSaved(read(a.file, "FILE").toString("utf8"), a.file);
    const bundles = loadBundleFile(a.bundle);
    if (a.proof && saved.kind !== "receipt")
      throw new SvcError("usage", "--proof goes with a receipt: statements are not proven in the log");
    const print = await import("../../lib/notary-objects/print.ts");
    if (saved.kind === "statement") {
      const { verifyStatement } = await import("../../lib/notary-objects/statement.ts");
      const v = await verifyStatement(saved.jws, bundles);
      process.stdout.write(
        a.output === "json"
          ? `${JSON.stringify({ id: v.id, claims: v.claims }, null, 2)}\n`
          : print.formatStatement(v.id, v.claims),
      );
      if (a.output !== "json")
        say("svc notary verify", "success", `statement ${v.id} verified: signature and chain`);
      return;
    }
    const request = a["request-body"]
      ? new Uint8Array(read(a["request-body"], "--request-body"))
      : saved.request;
    const response = a["response-body"]
      ? new Uint8Array(read(a["response-body"], "--response-body"))
      : saved.response;
    const { verifyReceipt } = await import("../../lib/notary-objects/receipt.ts");
    const v = await verifyReceipt(saved.jws, bundles, {
      ...(request ? { request: { body: request } } : {}),
      ...(response ? { response: { body: response } } : {}),
    });
    const inLog = a.proof
      ? await checkInLog(saved.jws, v.id, read(a.proof, "--proof").toString("utf8"), bundles, policy)
      : undefined;
    if (a.output === "json") {
      process.stdout.write(
        `${JSON.stringify({ id: v.id, claims: v.claims, bodiesChecked: { request: !!request, response: !!response }, ...(inLog ? { log: inLog } : {}) }, null, 2)}\n`,
      );
      return;
    }
    process.stdout.write(
      print.formatReceipt(v.id, v.claims, {
        ...(request ? { request } : {}),
        ...(response ? { response } : {}),
      }),
    );
    if (inLog) process.stdout.write(inLogText(inLog));
    const checked = [
      "signature and chain",
      ...(request ? ["the request body"] : []),
      ...(response ? ["the response body"] : []),
      ...(inLog ? ["its place in the notary log"] : []),
      ...(inLog?.cosignedBy ? [`the witness policy (${inLog.cosignedBy.length} cosignatures)`] : []),
    ];
    say("svc notary verify", "success", `receipt ${v.id} verified: ${checked.join(", ")}`);
    if (!request || !response)
      say(
        "svc notary verify",
        "info",
        `the ${!request && !response ? "request and response bodies were" : !request ? "request body was" : "response body was"} not checked (not in ${a.file}; pass --request-body / --response-body)`,
      );
  }),
});

export default defineCommand({
  meta: {
    name: "notary",
    description:
      "Work with notary objects: verify saved statements, receipts and proofs offline, or a whole notary log; inspect a witness",
  },
  subCommands: { verify, witness: witnessCommand },
});
