import { readFileSync, statSync } from "node:fs";
import { defineCommand } from "citty";
import { SvcError } from "../../lib/errors.ts";
import type { Notarization } from "../../lib/notary-objects/check.ts";
import { isLevel, LEVEL_HEADER, LEVELS } from "../../lib/notary-objects/levels.ts";
import { formatReceipt, formatStatement } from "../../lib/notary-objects/print.ts";
import { MAX_NOTARIZED_RESPONSE } from "../../lib/notary-objects/receipt.ts";
import { ENDPOINT_ENV, parseEndpoint, socketPath } from "../../lib/spiffe/address.ts";
import { authorizeMatching } from "../../lib/spiffe/authorizer.ts";
import type { ExchangeResponse } from "../../lib/tls/exchange.ts";
import { say } from "../say.ts";
import { action, checkOutput, repeated } from "./cli.ts";
import { applyGlobals, globalArgs, spiffeSocket } from "./globals.ts";
import { checkInLog, inLogText, witnessArgs, witnessPolicy } from "./receipt-in-log.ts";

const args = {
  url: {
    type: "positional",
    description: "URL to call (http:// plaintext, https:// SPIFFE mTLS)",
    required: true,
  },
  data: { type: "string", alias: "d", description: "POST data (@file reads a file, @- standard input)" },
  header: { type: "string", alias: "H", description: 'Adds a request header "Name: value" (repeatable)' },
  "notarization-level": {
    type: "string",
    alias: "n",
    description:
      "workload (statement only), logRequest (request logged by the notary), signRequest (signed receipt)",
    default: "workload",
  },
  "notary-id": {
    type: "string",
    description:
      "SPIFFE ID pattern (Go RE2, unanchored: use ^…$) the statement's issuer must match; repeatable [default: any workload of the trust bundle]",
  },
  "no-buffer": {
    type: "boolean",
    alias: "N",
    description:
      "Prints the body as it arrives (a streamed answer), once the statement is verified; a receipt is checked when the stream ends",
  },
  ...witnessArgs,
  "print-workload": { type: "boolean", description: "Prints the workload identity statement" },
  "print-receipt": { type: "boolean", description: "Prints the receipt; requires -n signRequest" },
  request: { type: "string", alias: "X", description: "HTTP method [default: GET, or POST with --data]" },
  "show-headers": { type: "boolean", alias: "i", description: "Shows the response status line and headers" },
  silent: { type: "boolean", alias: "s", description: "No progress output" },
  validate: {
    type: "string",
    description: "Require workload statement verification (true or false)",
    default: "true",
  },
  output: {
    type: "string",
    alias: "o",
    description: "Output format: json (everything in one object, for scripts)",
  },
  ...globalArgs,
} as const;

/** The largest statement fetched from /.svc/workload/{id} (a pod's annotations are at most 256 KiB). */
const STATEMENT_LIMIT = 4 * 1024 * 1024;

function usage(message: string): SvcError {
  return new SvcError("usage", message);
}

function headersFrom(values: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of values) {
    const i = h.indexOf(":");
    if (i <= 0) throw usage(`--header ${JSON.stringify(h)}: expected "Name: value"`);
    out[h.slice(0, i).trim().toLowerCase()] = h.slice(i + 1).trim();
  }
  return out;
}

function dataFrom(data: string): Uint8Array {
  if (!data.startsWith("@")) return new TextEncoder().encode(data);
  const file = data.slice(1);
  try {
    return new Uint8Array(readFileSync(file === "-" ? 0 : file));
  } catch (e) {
    throw usage(
      `--data ${data}: cannot read ${file === "-" ? "standard input" : file} (${(e as NodeJS.ErrnoException).code})`,
    );
  }
}

/**
 * A Workload API socket path that is not there fails at once, naming it and where it came from: the client
 * would otherwise retry until its 10 s timeout. A socket that exists but does not answer keeps that timeout.
 */
function requireSocket(flag: string | undefined): void {
  const path = socketPath(parseEndpoint(spiffeSocket(flag)));
  if (!path || !missing(path)) return;
  const from = flag
    ? "set by --spiffe-socket-path"
    : process.env[ENDPOINT_ENV]
      ? `set by ${ENDPOINT_ENV}`
      : "the default";
  throw new SvcError(
    "workload_api",
    `Workload API socket ${path} does not exist (${from}); point svc at yours with --spiffe-socket-path=unix:///path/to/agent.sock or ${ENDPOINT_ENV}=unix:///path/to/agent.sock`,
  );
}

/** Only "no such path" counts: on any other error (permissions) the connection attempt says what is wrong. */
function missing(path: string): boolean {
  try {
    statSync(path);
    return false;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return code === "ENOENT" || code === "ENOTDIR";
  }
}

export default defineCommand({
  meta: {
    name: "curl",
    description:
      "HTTP request that requires and verifies the server's workload identity statement (and, with -n signRequest, a signed receipt)",
  },
  args,
  run: action(args, async (a, rawArgs) => {
    const log = applyGlobals(a);
    const level = a["notarization-level"];
    if (!isLevel(level))
      throw usage(`--notarization-level ${JSON.stringify(level)}: allowed are ${LEVELS.join(", ")}`);
    if (!["true", "false"].includes(a.validate))
      throw usage(`--validate ${JSON.stringify(a.validate)}: expected true or false`);
    const validate = a.validate === "true";
    if (a["print-receipt"] && level !== "signRequest")
      throw usage("--print-receipt requires -n signRequest: only signRequest yields a receipt");
    if ((a["print-workload"] || a["print-receipt"]) && !validate)
      throw usage(
        "--print-workload and --print-receipt need --validate=true: only verified objects are printed",
      );
    checkOutput(a.output, ["json"]);
    const live = a["no-buffer"] === true;
    if (live && a.output === "json")
      throw usage(
        "--no-buffer prints the body as it arrives, -o json prints one object at the end: give one of them",
      );
    let url: URL;
    try {
      url = new URL(a.url);
    } catch {
      throw usage(`${JSON.stringify(a.url)} is not a URL (expected http://host[:port]/path or https://…)`);
    }
    const headers = headersFrom(repeated(rawArgs, ["-H", "--header"]));
    const notaryIds = repeated(rawArgs, ["--notary-id"]);
    if (notaryIds.length && !validate)
      throw usage("--notary-id needs --validate=true: it restricts who may issue the statement");
    if (notaryIds.some((p) => p.trim() === ""))
      throw usage(
        "--notary-id: an empty pattern would match every issuer; give a SPIFFE ID pattern such as ^spiffe://example.org/ns/svc-system/sa/notary$",
      );
    const policy = witnessPolicy(rawArgs, a["witness-threshold"]);
    if (policy && !validate)
      throw usage("--witness needs --validate=true: it checks the receipt's place in the witnessed log");
    if (policy && level !== "signRequest")
      throw usage("--witness needs -n signRequest: witnesses cosign the log a receipt is in");
    // An invalid pattern is an error naming the flag, exit status 1 like any usage error.
    const notaries = authorizeMatching(notaryIds, "--notary-id");
    const body = a.data !== undefined ? dataFrom(a.data) : undefined;
    if (body && !headers["content-type"])
      headers["content-type"] = /^\s*[[{]/.test(new TextDecoder().decode(body.subarray(0, 64)))
        ? "application/json"
        : "application/x-www-form-urlencoded";
    if (validate) {
      headers[LEVEL_HEADER] = level;
      // A fresh request ID, which a receipt must record: a receipt of another exchange fails.
      headers["x-request-id"] ??= crypto.randomUUID();
    }
    const method = (a.request ?? (body ? "POST" : "GET")).toUpperCase();
    const needsSource = validate || url.protocol === "https:";
    if (needsSource) requireSocket(a["spiffe-socket-path"]);

    const { exchange } = await import("../../lib/tls/exchange.ts");
    const { checkReceipt, checkStatement } = await import("../../lib/notary-objects/check.ts");
    const source = needsSource
      ? await (await import("../../lib/spiffe/x509-source.ts")).X509Source.open({
          address: spiffeSocket(a["spiffe-socket-path"]),
          timeoutMs: 10_000,
        })
      : undefined;
    try {
      const bundles = source?.bundles();
      /** A notary-query route on the server's origin: its status and body. */
      const query = async (path: string) => {
        log.debug("fetching", { path });
        const r = await exchange(new URL(path, url), {
          method: "GET",
          headers: {},
          ...(source ? { source } : {}),
          maxBodyBytes: STATEMENT_LIMIT,
          deadlineMs: 30_000,
        });
        return { status: r.status, text: new TextDecoder().decode(r.body) };
      };
      /** A notary object fetched from notary-query; undefined when it is not there. */
      const fetchObject = async (path: string, field: string) => {
        const r = await query(path);
        return r.status === 200 ? (JSON.parse(r.text)[field] as string) : undefined;
      };
      const checkHead = async (head: Pick<ExchangeResponse, "headers" | "peer">) => {
        if (!validate || !bundles) return undefined;
        const statement = await checkStatement(
          head.headers,
          bundles,
          (id) => fetchObject(`/.svc/workload/${id}`, "statement"),
          head.peer,
          notaries,
        );
        if (!a.silent)
          say("svc curl", "success", `workload statement ${statement.id} verified: ${statement.claims.sub}`);
        return statement;
      };
      const out = process.stdout;
      const printHead = (head: Omit<ExchangeResponse, "body">) => {
        if (!a["show-headers"] || a.output === "json") return;
        out.write(`HTTP/${head.httpVersion} ${head.status} ${head.statusText}\r\n`);
        for (let i = 0; i < head.rawHeaders.length; i += 2)
          out.write(`${head.rawHeaders[i]}: ${head.rawHeaders[i + 1]}\r\n`);
        out.write("\r\n");
      };
      // --no-buffer: an answer that is not an error is printed as it arrives, after its statement is
      // verified; what arrives before that check passes waits.
      let early: Notarization["statement"] | undefined;
      let streaming = false;
      log.debug("request", { method, url: url.href, notarization: validate ? level : "none" });
      const started = performance.now();
      const res = await exchange(url, {
        method,
        headers,
        ...(body ? { body } : {}),
        ...(source ? { source } : {}),
        // The whole body is held until it is verified; a notary notarizes none larger.
        ...(validate ? { maxBodyBytes: MAX_NOTARIZED_RESPONSE } : {}),
        ...(live
          ? {
              onHead: async (head: Omit<ExchangeResponse, "body">) => {
                if (head.status >= 400) return;
                early = await checkHead(head);
                printHead(head);
                streaming = true;
              },
              onData: (chunk: Buffer) => {
                if (streaming) out.write(chunk);
              },
            }
          : {}),
      });
      log.debug("response", {
        status: res.status,
        ms: Math.round(performance.now() - started),
        peer: res.peer?.uri ?? "none",
        workload_id: res.headers["svc-workload-id"] ?? "none",
      });
      // With validation on, nothing of the response reaches stdout before the checks pass.
      const print = () => {
        if (a.output === "json" || streaming) return;
        printHead(res);
        out.write(res.body);
      };
      if (res.status >= 400) {
        if (a.output === "json") out.write(`${JSON.stringify(summary(res, undefined, body), null, 2)}\n`);
        // An error answer is not verified: with validation on, its body goes to stderr as a diagnostic.
        else if (validate) process.stderr.write(res.body);
        else print();
        throw new SvcError("http_status", `HTTP error: ${res.status} ${res.statusText} from ${url.href}`);
      }
      let n: Notarization | undefined;
      let inLog: Awaited<ReturnType<typeof checkInLog>> | undefined;
      try {
        if (validate && bundles) {
          const statement = early ?? (await checkHead(res));
          if (!statement) throw new SvcError("statement", "workload statement verification failed");
          n = { statement };
          if (level === "signRequest") {
            n.receipt = await checkReceipt(
              res.headers,
              bundles,
              { id: statement.id, issuer: statement.claims.iss },
              {
                method,
                path: url.pathname + url.search,
                body: body ?? new Uint8Array(),
                requestId: headers["x-request-id"] as string,
              },
              { status: res.status, body: res.body },
              (id) => fetchObject(`/.svc/stream/${id}`, "receipt"),
            );
            if (!a.silent) say("svc curl", "success", `receipt ${n.receipt.id} verified`);
            if (policy) {
              // The notary is told which witnesses count: it serves a tree head enough of them cosigned.
              const params = new URLSearchParams([
                ["witnessed", String(policy.threshold)],
                ...policy.witnesses.map((w): [string, string] => ["witness", w]),
              ]);
              const path = `/.svc/receipt/${n.receipt.id}/proof?${params}`;
              const { status, text } = await query(path);
              if (status !== 200)
                throw new SvcError(
                  "receipt",
                  `witness check failed: the notary gave no inclusion proof of receipt ${n.receipt.id} cosigned by ${policy.threshold} witnesses (${status}: ${text.trim().slice(0, 300)})`,
                );
              inLog = await checkInLog(n.receipt.jws, n.receipt.id, text, bundles, policy, path);
              if (!a.silent) say("svc curl", "success", inLogText(inLog).trim());
            }
            const end = n.receipt.claims.svc.response.stream?.end;
            if (end && end !== "done" && end !== "closed")
              say(
                "svc curl",
                "warn",
                `the stream ended early (${end}); the receipt records the answer as far as it came`,
              );
          }
        }
      } catch (e) {
        // -o json always prints a result object: what was verified before the failure, and the failure.
        if (a.output === "json" && e instanceof SvcError)
          out.write(
            `${JSON.stringify({ ...summary(res, n, body, inLog), error: { code: e.code, message: e.message } }, null, 2)}\n`,
          );
        // What was printed as it arrived is not vouched for.
        if (streaming && e instanceof SvcError)
          throw new SvcError(e.code, `${e.message} (the body printed above is not vouched for)`);
        throw e;
      }
      print();
      if (a.output === "json") {
        out.write(`${JSON.stringify(summary(res, n, body, inLog), null, 2)}\n`);
        return;
      }
      if (a["print-workload"] && n) out.write(`\n${formatStatement(n.statement.id, n.statement.claims)}`);
      if (a["print-receipt"] && n?.receipt)
        out.write(
          `\n${formatReceipt(n.receipt.id, n.receipt.claims, { request: body ?? new Uint8Array(), response: res.body })}`,
        );
    } finally {
      source?.close();
    }
  }),
});

/**
 * What `-o json` prints. With a receipt, both bodies byte for byte (`request.bodyBase64`,
 * `response.bodyBase64`), the shape the notary serves a receipt in: `svc notary verify` checks the saved
 * output, bodies included, offline.
 */
function summary(
  res: { status: number; headers: Record<string, unknown>; body: Uint8Array },
  n: Notarization | undefined,
  sent: Uint8Array | undefined,
  inLog?: object,
): object {
  const base64 = (b: Uint8Array | undefined) => Buffer.from(b ?? new Uint8Array()).toString("base64");
  return {
    status: res.status,
    headers: res.headers,
    body: new TextDecoder().decode(res.body),
    ...(n ? { workload: n.statement } : {}),
    ...(n?.receipt
      ? {
          receipt: n.receipt,
          request: { bodyBase64: base64(sent) },
          response: { bodyBase64: base64(res.body) },
        }
      : {}),
    ...(inLog ? { log: inLog } : {}),
  };
}
