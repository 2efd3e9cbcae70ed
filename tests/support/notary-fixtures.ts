import { expect } from "bun:test";
import { DevCa } from "../../lib/dev/ca.ts";
import { bodyDigest } from "../../lib/notary-objects/ids.ts";
import { svidSigner } from "../../lib/notary-objects/jws.ts";
import { signReceipt } from "../../lib/notary-objects/receipt.ts";
import { BundleSet, X509Bundle } from "../../lib/spiffe/bundle.ts";
import { parseCert } from "../../lib/spiffe/cert.ts";
import type { SvidSource } from "../../lib/spiffe/x509-source.ts";
import { parseX509Svid, type X509Svid } from "../../lib/spiffe/x509svid.ts";
import type { ListenerConfig } from "../../proxy/config/types.ts";
import type { ProxyRequest, ProxyResponse } from "../../proxy/http/types.ts";
import { createLogger } from "../../proxy/log.ts";
import { notaryQuery } from "../../proxy/middleware/notary-query.ts";
import { Notary } from "../../proxy/notary-service/notary.ts";
import type { Exchange, NotaryStore } from "../../proxy/notary-service/store.ts";

/**
 * What the notary store tests share: a notary identity from a development CA (a real SVID and bundle),
 * exchanges, receipts signed with that SVID, and a Notary over a store (its pod lookup unused: these
 * tests are about the store and the log).
 */
export const NOTARY = "spiffe://example.org/ns/edge/sa/notary";
export const ORIGIN = "https://api.example";

export interface NotaryIdentity {
  ca: DevCa;
  svid: X509Svid;
  bundles: BundleSet;
  source: SvidSource;
}

export async function notaryIdentity(): Promise<NotaryIdentity> {
  return workloadIdentity(await DevCa.open("example.org"), NOTARY);
}

/** Another workload of the notary's trust domain (a witness), with an SVID from the same CA. */
export async function workloadIdentity(ca: DevCa, spiffeId: string): Promise<NotaryIdentity> {
  const issued = await ca.issueX509Svid(spiffeId, 3_600_000);
  const svid = parseX509Svid(issued.certDer, issued.keyDer);
  const bundles = new BundleSet([new X509Bundle("example.org", [parseCert(ca.caDer)])]);
  const source = {
    getX509Svid: () => svid,
    getX509Bundle: (td: string) => bundles.getX509Bundle(td),
    bundles: () => bundles,
    onUpdate: () => () => {},
  } as SvidSource;
  return { ca, svid, bundles, source };
}

export const exchange = (n: number): Exchange => ({
  requestId: `req-${n}`,
  statementId: "S".repeat(43),
  level: "signRequest",
  method: "POST",
  path: "/v1/chat/completions",
  requestHeaders: { "content-type": "application/json", "x-n": String(n) },
  requestBody: new TextEncoder().encode(`{"n":${n}}`),
  status: 200,
  responseHeaders: { "content-type": "application/json" },
  responseBody: new TextEncoder().encode(`{"answer":${n}}`),
});

/** Exchange n with its receipt, signed with the notary's SVID. */
export async function receiptFor(id: NotaryIdentity, n: number) {
  const x = exchange(n);
  const r = await signReceipt(
    NOTARY,
    ORIGIN,
    x.statementId,
    x.requestId,
    {
      request: { method: x.method, path: x.path, headers: {}, body: bodyDigest(x.requestBody) },
      response: { status: 200, headers: {}, body: bodyDigest(x.responseBody) },
    },
    svidSigner(id.svid.keyPem, id.svid.chain),
  );
  return { x, receipt: { id: r.id, jws: r.jws } };
}

export const notaryOver = (store: NotaryStore, id: NotaryIdentity) =>
  new Notary({
    store,
    source: id.source,
    jwtSvid: async () => "",
    getPod: async () => undefined,
    log: createLogger({ level: "error", encoder: "json" }),
  });

/**
 * Asks `notary`'s query routes (proxy/middleware/notary-query.ts) for `path` as a listener with target
 * ORIGIN would; paths the routes do not answer come back as the body "next".
 */
export function queryNotary(notary: Notary, path: string, method = "GET"): Promise<ProxyResponse> {
  const query = notaryQuery({ listener: { target: new URL(ORIGIN) } as ListenerConfig, notary });
  return query(
    { path, method, log: createLogger({ level: "error", encoder: "json" }) } as ProxyRequest,
    async () => ({ status: 404, headers: {}, body: "next" }),
  );
}

/**
 * What either store does with cosignatures (notary.witnesses): the newest kept tree head over a leaf with
 * enough of them, and a witness's newest KEPT_COSIGNATURES kept only. Tree heads of 1 to 70 leaves are
 * kept, witness A cosigns them all, witness B the first five.
 */
export async function checkCosignatures(store: NotaryStore): Promise<void> {
  const root = new Uint8Array(32);
  for (let size = 1; size <= 70; size++) {
    await store.putTreeHead({ size, root, jws: `head-${size}` });
    await store.putCosignature(size, "A", `a-${size}`);
    if (size <= 5) await store.putCosignature(size, "B", `b-${size}`);
  }
  const found = await store.cosignedHead(0, { count: 1 });
  expect({ size: found?.head.size, jws: found?.head.jws, cosignatures: found?.cosignatures }).toEqual({
    size: 70,
    jws: "head-70",
    cosignatures: ["a-70"],
  });
  expect((await store.cosignedHead(69, { count: 1 }))?.head.size).toBe(70);
  // A head covers leaf 70 only with 71 leaves or more.
  expect(await store.cosignedHead(70, { count: 1 })).toBeUndefined();
  // A keeps its newest 64 (7 to 70): no head has both A's and B's now; B alone cosigned 5.
  expect(await store.cosignedHead(0, { count: 2 })).toBeUndefined();
  expect((await store.cosignedHead(0, { count: 1, by: ["B"] }))?.head.size).toBe(5);
  await store.putCosignature(70, "B", "b-70");
  expect((await store.cosignedHead(0, { count: 2 }))?.cosignatures).toEqual(["a-70", "b-70"]);
  // Only the witnesses named count: B last cosigned at 70; C, never.
  expect((await store.cosignedHead(0, { count: 1, by: ["B"] }))?.head.size).toBe(70);
  expect(await store.cosignedHead(0, { count: 1, by: ["C"] })).toBeUndefined();
  expect(await store.cosignedHead(0, { count: 2, by: ["A", "C"] })).toBeUndefined();
  // A cosignature of a size no tree head is kept for (cut from the database) is passed over.
  await store.putCosignature(80, "A", "a-80");
  expect((await store.cosignedHead(0, { count: 1 }))?.head.size).toBe(70);
  // Only the named witnesses' cosignatures come with the head.
  expect((await store.cosignedHead(0, { count: 1, by: ["B"] }))?.cosignatures).toEqual(["b-70"]);
  // Cosigned again (after a rotation): the newer cosignature replaces the older.
  await store.putCosignature(70, "B", "b-70-again");
  expect((await store.cosignedHead(0, { count: 2 }))?.cosignatures).toEqual(["a-70", "b-70-again"]);
}
