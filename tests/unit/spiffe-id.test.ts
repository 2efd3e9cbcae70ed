import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { isSvcError } from "../../lib/errors.ts";
import { parseSpiffeId, parseTrustDomain, podIdentity } from "../../lib/spiffe/id.ts";

// The rules of the SPIFFE ID standard, section 2, one row each.
const valid: [string, string, string][] = [
  ["spiffe://example.org", "example.org", ""],
  ["spiffe://example.org/workload", "example.org", "/workload"],
  ["spiffe://example.org/ns/default/sa/web", "example.org", "/ns/default/sa/web"],
  ["spiffe://trust_domain-1.example/a.b/c-d/e_f", "trust_domain-1.example", "/a.b/c-d/e_f"],
  ["spiffe://192.168.1.1/path", "192.168.1.1", "/path"],
  ["spiffe://example.org/UPPER/Case", "example.org", "/UPPER/Case"],
  ["spiffe://example.org/...a/b..", "example.org", "/...a/b.."],
];

const invalid: [string, RegExp][] = [
  ["", /empty/],
  ["http://example.org/a", /scheme must be spiffe/],
  ["SPIFFE://example.org/x", /scheme must be spiffe:\/\/ in lower case/],
  ["Spiffe://example.org/x", /scheme must be spiffe:\/\/ in lower case/],
  ["spiffe://EXAMPLE.ORG/x", /trust domain must be lower case/],
  ["spiffe://Example.org/x", /trust domain must be lower case/],
  ["spiffe:/example.org/a", /scheme must be spiffe/],
  ["spiffe://", /trust domain is empty/],
  ["spiffe:///path", /trust domain is empty/],
  ["spiffe://example.org:8080/a", /port is not allowed/],
  ["spiffe://user@example.org/a", /userinfo is not allowed/],
  ["spiffe://example.org/a?x=1", /query is not allowed/],
  ["spiffe://example.org/a#frag", /fragment is not allowed/],
  ["spiffe://example.org/", /trailing \/ is not allowed/],
  ["spiffe://example.org/a/", /trailing \/ is not allowed/],
  ["spiffe://example.org//a", /empty path segments/],
  ["spiffe://example.org/a/./b", /segment \. is not allowed/],
  ["spiffe://example.org/a/../b", /segment \.\. is not allowed/],
  ["spiffe://example.org/..", /segment \.\. is not allowed/],
  ["spiffe://example.org/a%20b", /percent-encoding/],
  ["spiffe://exa%6Dple.org/a", /percent-encoding/],
  ["spiffe://example.org/a b", /character " " is not allowed in a path segment/],
  ["spiffe://example.org/a:b", /character ":" is not allowed/],
  ["spiffe://exa mple.org/a", /character " " is not allowed in the trust domain/],
  ["spiffe://[::1]/a", /not allowed in the trust domain/],
  [`spiffe://${"a".repeat(256)}/x`, /longer than 255 bytes/],
  [`spiffe://example.org/${"a".repeat(2048)}`, /longer than 2048 bytes/],
];

describe("SPIFFE ID parsing", () => {
  test.each(valid)("accepts %s", (input, trustDomain, path) => {
    const id = parseSpiffeId(input);
    expect(id.trustDomain).toBe(trustDomain);
    expect(id.path).toBe(path);
    expect(id.uri).toBe(`spiffe://${trustDomain}${path}`);
  });

  test.each(invalid)("rejects %s", (input, why) => {
    let error: unknown;
    try {
      parseSpiffeId(input);
    } catch (e) {
      error = e;
    }
    expect(isSvcError(error, "invalid_spiffe_id")).toBe(true);
    expect((error as Error).message).toMatch(why);
  });

  test("accepts an ID of exactly 2048 bytes", () => {
    const prefix = "spiffe://example.org/";
    expect(parseSpiffeId(prefix + "a".repeat(2048 - prefix.length)).uri.length).toBe(2048);
  });

  test("trust domain names are validated on their own", () => {
    expect(parseTrustDomain("example.org")).toBe("example.org");
    expect(parseTrustDomain("spiffe://example.org")).toBe("example.org");
    expect(() => parseTrustDomain("Example.org")).toThrow(/lower case/);
  });

  test("canonical form round-trips for any valid trust domain and path", () => {
    const tdChar = fc.constantFrom(..."abcdefghijklmnopqrstuvwxyz0123456789.-_");
    const segChar = fc.constantFrom(..."abcXYZ0123456789.-_");
    const td = fc.string({ unit: tdChar, minLength: 1, maxLength: 30 });
    const segment = fc
      .string({ unit: segChar, minLength: 1, maxLength: 12 })
      .filter((s) => s !== "." && s !== "..");
    fc.assert(
      fc.property(td, fc.array(segment, { maxLength: 6 }), (t, segs) => {
        const uri = `spiffe://${t}${segs.map((s) => `/${s}`).join("")}`;
        const id = parseSpiffeId(uri);
        expect(id.uri).toBe(uri);
        expect(parseSpiffeId(id.uri)).toEqual(id);
      }),
    );
  });
});

describe("pod-form SPIFFE IDs", () => {
  test("extracts namespace, service account, pod name and UID", () => {
    const id = parseSpiffeId(
      "spiffe://cluster.local/ns/prod/sa/api/pod/api-7d9f/1b4e28ba-2fa1-11d2-883f-0016d3cca427",
    );
    expect(podIdentity(id)).toEqual({
      trustDomain: "cluster.local",
      namespace: "prod",
      serviceAccount: "api",
      podName: "api-7d9f",
      podUid: "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
    });
  });

  test.each([
    "spiffe://cluster.local/ns/prod/sa/api",
    "spiffe://cluster.local/ns/prod/sa/api/pod/api-7d9f",
    "spiffe://cluster.local/ns/prod/sa/api/pod/api-7d9f/uid/extra",
    "spiffe://cluster.local/namespace/prod/sa/api/pod/p/u",
    "spiffe://cluster.local/ns/prod/serviceaccount/api/pod/p/u",
  ])("%s is not the pod form", (uri) => {
    expect(podIdentity(parseSpiffeId(uri))).toBeUndefined();
  });
});
