import { describe, expect, test } from "bun:test";
import { isSvcError } from "../../lib/errors.ts";
import { authorizeMatching, compilePatterns } from "../../lib/spiffe/authorizer.ts";
import { parseSpiffeId } from "../../lib/spiffe/id.ts";

const web = parseSpiffeId("spiffe://example.org/ns/prod/sa/web");
const db = parseSpiffeId("spiffe://example.org/ns/prod/sa/db");
const foreign = parseSpiffeId("spiffe://other.org/ns/prod/sa/web");

describe("authorizers", () => {
  test("patterns: at least one must match; the denial names the peer and the patterns", () => {
    const a = authorizeMatching([
      "^spiffe://example\\.org/ns/prod/sa/web$",
      "^spiffe://example\\.org/ns/ops/.*$",
    ]);
    expect(a(web).allowed).toBe(true);
    expect(a(parseSpiffeId("spiffe://example.org/ns/ops/sa/x")).allowed).toBe(true);
    const d = a(db);
    expect(d.allowed).toBe(false);
    expect(!d.allowed && d.reason).toBe(
      'peer spiffe://example.org/ns/prod/sa/db matches none of 2 allowed pattern(s) ["^spiffe://example\\\\.org/ns/prod/sa/web$","^spiffe://example\\\\.org/ns/ops/.*$"]',
    );
  });

  test("an empty pattern list allows any authenticated peer (docs/identity.md)", () => {
    expect(authorizeMatching([])(foreign)).toEqual({ allowed: true });
    expect(authorizeMatching([])(db)).toEqual({ allowed: true });
  });

  test("unanchored patterns match anywhere, like Go's MatchString", () => {
    expect(authorizeMatching(["sa/web"])(web).allowed).toBe(true);
    expect(authorizeMatching(["sa/web"])(db).allowed).toBe(false);
  });

  test("a dot left unescaped matches any character, as in Go", () => {
    const look = parseSpiffeId("spiffe://example-org/ns/prod/sa/web");
    expect(authorizeMatching(["^spiffe://example.org/"])(look).allowed).toBe(true);
    expect(authorizeMatching(["^spiffe://example\\.org/"])(look).allowed).toBe(false);
  });
});

describe("RE2 semantics where JS RegExp differs", () => {
  // [pattern, input, RE2 (Go) result]; JS RegExp's result on the same text is asserted to differ.
  const differs: [string, string, boolean][] = [
    ["(?i)^SPIFFE://EXAMPLE\\.ORG/", "spiffe://example.org/a", true], // inline flags: JS throws
    ["^spiffe://example\\.org/a\\z", "spiffe://example.org/a", true], // \z is end of text; JS reads "z"
    ["^spiffe://example\\.org/\\pL+$", "spiffe://example.org/web", true], // Unicode class; JS reads "pL"
    ["^spiffe://example\\.org/[[:alpha:]]+$", "spiffe://example.org/web", true], // POSIX class
    ["^\\Qspiffe://example.org/\\E", "spiffe://example.org/a", true], // literal quoting
    ["^spiffe://example\\.org/(?P<sa>[a-z]+)$", "spiffe://example.org/web", true], // Go named group
  ];

  test.each(differs)("%s", (pattern, input, expected) => {
    expect(compilePatterns([pattern])[0]?.matcher(input).find()).toBe(expected);
    let js: boolean | string;
    try {
      js = new RegExp(pattern).test(input);
    } catch {
      js = "syntax error";
    }
    expect(js).not.toBe(expected);
  });

  test.each([
    ["^spiffe://(?=x)", /invalid or unsupported Perl syntax/], // lookahead: JS accepts, RE2 has none
    ["^(a)\\1$", /invalid escape sequence/], // backreference: JS accepts, RE2 refuses
    ["^spiffe://[a-", /missing closing ]/],
    ["a{2,1}", /invalid repeat count/],
  ])("%s is a configuration error", (pattern, why) => {
    let error: unknown;
    try {
      compilePatterns(["^ok$", pattern], "listeners[1].source.spiffe_ids");
    } catch (e) {
      error = e;
    }
    expect(isSvcError(error, "invalid_pattern")).toBe(true);
    expect((error as Error).message).toStartWith(
      `listeners[1].source.spiffe_ids[1]: invalid pattern ${JSON.stringify(pattern)}`,
    );
    expect((error as Error).message).toMatch(why);
  });

  test("every invalid pattern is reported at once", () => {
    expect(() => compilePatterns(["(", "ok", "[", "(?=a)"])).toThrow(
      /spiffe_ids\[0\].*\nspiffe_ids\[2\].*\nspiffe_ids\[3\]/,
    );
  });

  test("matching time stays linear on input that makes backtracking engines explode", () => {
    const [re] = compilePatterns(["^spiffe://x/(a+)+$"]);
    const input = `spiffe://x/${"a".repeat(5000)}!`;
    expect(re?.matcher(input).find()).toBe(false);
  });
});
