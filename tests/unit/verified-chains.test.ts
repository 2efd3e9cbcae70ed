import { beforeAll, describe, expect, test } from "bun:test";
import { DevCa } from "../../lib/dev/ca.ts";
import { BundleSet, X509Bundle } from "../../lib/spiffe/bundle.ts";
import { parseCert } from "../../lib/spiffe/cert.ts";
import { verifyPeerChain } from "../../lib/tls/verified-chains.ts";
import { svcError } from "../support/errors.ts";

let ca: DevCa;
let other: DevCa;
const ID = "spiffe://example.org/ns/default/sa/web";
const trusting = (c: DevCa) => new BundleSet([new X509Bundle("example.org", [parseCert(c.caDer)])]);

beforeAll(async () => {
  ca = await DevCa.open("example.org");
  other = await DevCa.open("example.org");
});

describe("remembered peer chain verification", () => {
  test("the same chain under the same bundle is answered from memory", async () => {
    const l = await ca.issue({ uris: [ID], ttlMs: 60_000 });
    const bundles = trusting(ca);
    const first = verifyPeerChain([l.certDer], bundles);
    expect(verifyPeerChain([l.certDer], bundles)).toBe(first);
  });

  test("a replaced bundle that no longer trusts the chain refuses it", async () => {
    const l = await ca.issue({ uris: [ID], ttlMs: 60_000 });
    expect(verifyPeerChain([l.certDer], trusting(ca)).id.uri).toBe(ID);
    expect(svcError(() => verifyPeerChain([l.certDer], trusting(other))).code).toBe("untrusted_peer");
  });

  test("outside the chain's validity the chain is verified again, and refused", async () => {
    const l = await ca.issue({ uris: [ID], ttlMs: 60_000 });
    const bundles = trusting(ca);
    verifyPeerChain([l.certDer], bundles);
    const later = new Date(Date.now() + 120_000);
    expect(svcError(() => verifyPeerChain([l.certDer], bundles, later)).code).toBe("invalid_svid");
  });
});
