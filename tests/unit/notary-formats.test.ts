import { beforeAll, describe, expect, test } from "bun:test";
import { DevCa } from "../../lib/dev/ca.ts";
import { treeSize } from "../../lib/notary-objects/checkpoint.ts";
import { bodyDigest, contentId, isContentId } from "../../lib/notary-objects/ids.ts";
import { type SvidSigner, signJws, svidSigner } from "../../lib/notary-objects/jws.ts";
import { formatStatement } from "../../lib/notary-objects/print.ts";
import { receiptHeaders, signReceipt, verifyReceipt } from "../../lib/notary-objects/receipt.ts";
import {
  STATEMENT_TYP,
  signStatement,
  verifyStatement,
  type WorkloadFacts,
} from "../../lib/notary-objects/statement.ts";
import { BundleSet, X509Bundle } from "../../lib/spiffe/bundle.ts";
import { derToPem, parseCert } from "../../lib/spiffe/cert.ts";
import { svcErrorOf } from "../support/errors.ts";

const PROXY = "spiffe://example.org/ns/edge/sa/proxy";
const POD = "spiffe://example.org/ns/alpha/sa/api/pod/api-0/0b0c0d0e-0000-4000-8000-000000000001";
let ca: DevCa;
let other: DevCa;
let signer: SvidSigner;
let bundles: BundleSet;

const facts: WorkloadFacts = {
  trustDomain: "example.org",
  spiffeId: POD,
  namespace: "alpha",
  serviceAccount: "api",
  podName: "api-0",
  podUid: "0b0c0d0e-0000-4000-8000-000000000001",
  images: ["registry.example/api:1.0"],
  labels: { app: "api" },
  annotations: { "mls.svc.dev/compartment": "alpha", "mls.svc.dev/level": "secret" },
  certificateID: "A".repeat(43),
};

async function signerFrom(issuer: DevCa, id: string): Promise<SvidSigner> {
  const svid = await issuer.issueX509Svid(id, 60_000);
  return svidSigner(derToPem(svid.keyDer, "PRIVATE KEY"), [parseCert(svid.certDer)]);
}

/** Replaces the payload of a compact JWS, keeping header and signature. */
function tamper(jws: string, edit: (claims: Record<string, unknown>) => void): string {
  const [h, p, s] = jws.split(".") as [string, string, string];
  const claims = JSON.parse(Buffer.from(p, "base64url").toString());
  edit(claims);
  return [h, Buffer.from(JSON.stringify(claims)).toString("base64url"), s].join(".");
}

beforeAll(async () => {
  ca = await DevCa.open("example.org");
  other = await DevCa.open("example.org");
  signer = await signerFrom(ca, PROXY);
  bundles = new BundleSet([new X509Bundle("example.org", [parseCert(ca.caDer)])]);
});

describe("content IDs", () => {
  test("are base64url SHA-256 of the exact bytes", () => {
    const id = contentId("abc");
    expect(id).toBe("ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0");
    expect(isContentId(id)).toBe(true);
    expect(isContentId(`${id}=`)).toBe(false);
    expect(isContentId("../etc/passwd")).toBe(false);
  });
});

describe("tree sizes in decimal (checkpoints, add-checkpoint, a witness's 409, the query routes)", () => {
  test("digits without a leading zero, a safe integer; nothing else", () => {
    for (const [text, n] of [
      ["0", 0],
      ["7", 7],
      ["9007199254740991", 9007199254740991],
    ] as const)
      expect(treeSize(text)).toBe(n);
    for (const text of [
      "",
      "01",
      "+1",
      " 1",
      "1 ",
      "1e3",
      "0x10",
      "-1",
      "9007199254740992",
      "99999999999999999",
    ])
      expect(treeSize(text)).toBeUndefined();
  });
});

describe("workload statements", () => {
  test("sign and verify; the ID is the hash of the JWS", async () => {
    const s = await signStatement(PROXY, "https://api.alpha:8443", facts, signer);
    expect(s.id).toBe(contentId(s.jws));
    const v = await verifyStatement(s.jws, bundles, s.id);
    expect(v.issuer.uri).toBe(PROXY);
    expect(v.claims.sub).toBe(POD);
    expect(v.claims.aud).toBe("https://api.alpha:8443/workload-statement");
    expect(v.claims.svc.images).toEqual(["registry.example/api:1.0"]);
  });

  test("a statement whose ID differs from the header's is refused", async () => {
    const s = await signStatement(PROXY, "https://api", facts, signer);
    const f = await svcErrorOf(verifyStatement(s.jws, bundles, contentId("something else")));
    expect(f.code).toBe("statement");
    expect(f.message).toContain("workload statement verification failed: its ID is");
  });

  test("a changed claim breaks the signature", async () => {
    const s = await signStatement(PROXY, "https://api", facts, signer);
    const forged = tamper(s.jws, (c) => {
      (c.svc as WorkloadFacts).podName = "other-0";
    });
    expect((await svcErrorOf(verifyStatement(forged, bundles))).message).toContain("bad signature");
  });

  test("a signer from another CA of the same trust domain is not trusted", async () => {
    const s = await signStatement(PROXY, "https://api", facts, await signerFrom(other, PROXY));
    expect((await svcErrorOf(verifyStatement(s.jws, bundles))).message).toContain(
      "signing certificate not trusted",
    );
  });

  test("iss must be the signer's SPIFFE ID", async () => {
    const s = await signStatement(
      "spiffe://example.org/ns/edge/sa/someone-else",
      "https://api",
      facts,
      signer,
    );
    expect((await svcErrorOf(verifyStatement(s.jws, bundles))).message).toContain("is not the signer");
  });

  test("verification uses the time of issue, so a saved statement verifies after its signer expired", async () => {
    // A signer whose certificate was valid for 11 s, from 30 s ago (it expired 19 s ago); the statement
    // was made while it was valid.
    const notBefore = new Date(Date.now() - 30_000);
    const expired = await ca.issue({ uris: [PROXY], ttlMs: 1_000, notBefore });
    const past = new Date(notBefore.getTime() + 5_000);
    const s = await signStatement(
      PROXY,
      "https://api",
      facts,
      svidSigner(derToPem(expired.keyDer, "PRIVATE KEY"), [parseCert(expired.certDer)]),
      past,
    );
    expect((await verifyStatement(s.jws, bundles)).claims.iat).toBe(Math.floor(past.getTime() / 1000));
    const beforeIssue = await signStatement(
      PROXY,
      "https://api",
      facts,
      signer,
      new Date(Date.now() - 3_600_000),
    );
    expect((await svcErrorOf(verifyStatement(beforeIssue.jws, bundles))).message).toContain(
      "not valid before",
    );
  });

  test("garbage is refused with a clear message", async () => {
    expect((await svcErrorOf(verifyStatement("not-a-jws", bundles))).message).toContain("not a compact JWS");
  });

  test("an iat that is no date is refused: it would skip the certificate's validity checks", async () => {
    // A signer whose certificate was valid for a second an hour ago: at no iat of today is it valid.
    const expired = await ca.issue({
      uris: [PROXY],
      ttlMs: 1_000,
      notBefore: new Date(Date.now() - 3_600_000),
    });
    const old = svidSigner(derToPem(expired.keyDer, "PRIVATE KEY"), [parseCert(expired.certDer)]);
    const claims = (iat: unknown) => ({
      iss: PROXY,
      sub: POD,
      aud: "https://api/workload-statement",
      iat,
      svc: facts,
    });
    for (const iat of [1e13, -1, 1.5, Number.MAX_SAFE_INTEGER]) {
      const jws = await signJws(claims(iat), old, STATEMENT_TYP);
      expect((await svcErrorOf(verifyStatement(jws, bundles))).message).toContain(
        `iat ${JSON.stringify(iat)} is not a time in whole seconds`,
      );
    }
    const jws = await signJws(claims("1700000000"), old, STATEMENT_TYP);
    expect((await svcErrorOf(verifyStatement(jws, bundles))).message).toContain("malformed claims: iat");
  });

  test("a signed statement of another shape is refused, naming the field, before anything reads it", async () => {
    const base = {
      iss: PROXY,
      sub: POD,
      aud: "https://api/workload-statement",
      iat: Math.floor(Date.now() / 1000),
    };
    const cases: [object, string][] = [
      [{ ...base, svc: { ...facts, images: undefined } }, "malformed claims: svc.images"],
      [{ ...base, svc: { ...facts, labels: { app: 1 } } }, "malformed claims: svc.labels.app"],
      [{ ...base, svc: "x" }, "malformed claims: svc"],
    ];
    for (const [claims, message] of cases) {
      const jws = await signJws(claims, signer, STATEMENT_TYP);
      const f = await svcErrorOf(verifyStatement(jws, bundles));
      expect(f.code).toBe("statement");
      expect(f.message).toContain(message);
    }
  });

  test("another base64url spelling of the same signature (unused bits set) is refused", async () => {
    const s = await signStatement(PROXY, "https://api", facts, signer);
    const sig = s.jws.split(".")[2] as string;
    const last = sig.at(-1) as string;
    // An ES256 signature is 64 bytes: its last base64url character carries 2 bits and 4 unused ones.
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const twin = alphabet[alphabet.indexOf(last) ^ 1] as string;
    const respelled = `${s.jws.slice(0, -1)}${twin}`;
    expect(Buffer.from(respelled.split(".")[2] as string, "base64url")).toEqual(
      Buffer.from(sig, "base64url"),
    );
    expect((await svcErrorOf(verifyStatement(respelled, bundles))).message).toContain(
      "not a compact JWS in canonical base64url",
    );
  });

  test("printed values cannot fake lines or hide the rest on a terminal", async () => {
    const s = await signStatement(
      PROXY,
      "https://api",
      { ...facts, annotations: { note: "x\n  Issuer:                 spiffe://example.org/fake\u001b[8m" } },
      signer,
    );
    const printed = formatStatement(s.id, (await verifyStatement(s.jws, bundles)).claims);
    expect(printed).not.toContain("\u001b");
    expect(printed.split("\n").filter((l) => l.startsWith("  Issuer:"))).toEqual([
      `  Issuer:                 ${PROXY}`,
    ]);
    expect(printed).toContain("note: x\\u000a  Issuer:");
  });
});

describe("receipts", () => {
  const exchange = {
    request: {
      method: "POST",
      path: "/v1/chat/completions",
      headers: receiptHeaders({ "Content-Type": "application/json", Authorization: "Bearer sk-secret" }),
      body: bodyDigest('{"model":"m"}'),
    },
    response: {
      status: 200,
      headers: receiptHeaders({ "content-type": "application/json" }),
      body: bodyDigest("{}"),
    },
  };

  test("a body changed on its way: the caller's bytes verify, the forwarded ones are bound too", async () => {
    const changed = {
      request: {
        ...exchange.request,
        body: bodyDigest('{"model":"m","junk":1}'),
        forwardedBody: bodyDigest('{"model":"m"}'),
      },
      response: { ...exchange.response, upstreamBody: bodyDigest('{"x":1}') },
    };
    const r = await signReceipt(PROXY, "https://api", "S".repeat(43), "req-2", changed, signer);
    const check = (body: string) =>
      verifyReceipt(r.jws, bundles, { request: { body }, response: { body: "{}" } });
    expect((await check('{"model":"m","junk":1}')).claims.svc.request.forwardedBody).toEqual(
      bodyDigest('{"model":"m"}'),
    );
    await expect(check('{"model":"m"}')).rejects.toThrow(
      /^receipt verification failed: the request body does not match: sent 13 bytes sha256 [0-9a-f]{64}, the receipt records 22 bytes/,
    );
  });

  test("credentials never enter a receipt", () => {
    expect(exchange.request.headers).toEqual({ "content-type": "application/json" });
  });

  test("verify against what was sent and received", async () => {
    const r = await signReceipt(PROXY, "https://api", "S".repeat(43), "req-1", exchange, signer);
    const v = await verifyReceipt(r.jws, bundles, {
      expectedId: r.id,
      statementId: "S".repeat(43),
      request: { method: "post", path: "/v1/chat/completions", body: '{"model":"m"}' },
      response: { status: 200, body: "{}" },
    });
    expect(v.claims.aud).toEqual(["https://api/receipt"]);
    expect(v.claims.svc.requestID).toBe("req-1");
  });

  test("a receipt of another request (its X-Request-Id) or by another signer than the statement's fails", async () => {
    const r = await signReceipt(PROXY, "https://api", "S".repeat(43), "req-1", exchange, signer);
    const other = await svcErrorOf(verifyReceipt(r.jws, bundles, { requestId: "req-2" }));
    expect(other.code).toBe("receipt");
    expect(other.message).toContain('it records request ID "req-1", the request was sent as "req-2"');
    const notary = "spiffe://example.org/ns/edge/sa/notary";
    expect((await svcErrorOf(verifyReceipt(r.jws, bundles, { issuer: notary }))).message).toContain(
      `it is signed by ${PROXY}, but the workload statement by ${notary}`,
    );
    expect((await verifyReceipt(r.jws, bundles, { requestId: "req-1", issuer: PROXY })).id).toBe(r.id);
  });

  test("a receipt whose aud is not a list is refused, not printed", async () => {
    const r = await signReceipt(PROXY, "https://api", "S".repeat(43), "req-1", exchange, signer);
    const claims = JSON.parse(Buffer.from(r.jws.split(".")[1] as string, "base64url").toString());
    const jws = await signJws({ ...claims, aud: "https://api/receipt" }, signer, "svc-receipt+jws");
    expect((await svcErrorOf(verifyReceipt(jws, bundles))).message).toContain("malformed claims: aud");
  });

  test("a different body, status or statement fails", async () => {
    const r = await signReceipt(PROXY, "https://api", "S".repeat(43), "req-1", exchange, signer);
    const body = await svcErrorOf(verifyReceipt(r.jws, bundles, { response: { body: "{ }" } }));
    expect(body.code).toBe("receipt");
    expect(body.message).toContain("the response body does not match");
    expect(
      (await svcErrorOf(verifyReceipt(r.jws, bundles, { response: { status: 500 } }))).message,
    ).toContain("records status 200");
    expect(
      (await svcErrorOf(verifyReceipt(r.jws, bundles, { statementId: "T".repeat(43) }))).message,
    ).toContain("names workload statement");
  });

  test("a tampered receipt fails", async () => {
    const r = await signReceipt(PROXY, "https://api", "S".repeat(43), "req-1", exchange, signer);
    const forged = tamper(r.jws, (c) => {
      (c.svc as { response: { status: number } }).response.status = 201;
    });
    expect((await svcErrorOf(verifyReceipt(forged, bundles))).message).toContain("bad signature");
  });

  test("a statement is not accepted as a receipt", async () => {
    const s = await signStatement(PROXY, "https://api", facts, signer);
    expect((await svcErrorOf(verifyReceipt(s.jws, bundles))).message).toContain('expected "svc-receipt+jws"');
  });
});
