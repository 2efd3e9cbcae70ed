import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  emptyParts,
  type HeadParts,
  readRequestHead,
  readResponseHead,
} from "../../proxy/http/wire/head-bytes.ts";
import { RequestHead, readRequestText } from "../../proxy/http/wire/request-framer.ts";
import { readResponseText } from "../../proxy/http/wire/response-framer.ts";

/**
 * The byte reader of heads (proxy/http/wire/head-bytes.ts) against the string reader it stands in for: on
 * generated heads and their mutations, every head the byte reader accepts, the string reader accepts with
 * the same parts. (Where the byte reader declines, the framers ask the string reader, so its answer,
 * accept or refuse, is the framer's.)
 */

const pick = <T>(xs: readonly T[]) => fc.constantFrom(...xs);
/** Mostly the first (well-formed) value, sometimes any. */
const mostly = <T>(xs: readonly T[]) =>
  fc.oneof({ arbitrary: fc.constant(xs[0] as T), weight: 3 }, { arbitrary: pick(xs), weight: 1 });
/** Bytes that sit on the grammar's edges: controls, CR and LF, DEL, obs-text, separators. */
const odd = pick([
  "\x00",
  "\t",
  "\r",
  "\n",
  "\r\n",
  " ",
  "\x7f",
  "\x80",
  "\xff",
  ":",
  "/",
  "*",
  "\x0b",
  "\x1f",
]);
const name = pick([
  "Host",
  "host",
  "Content-Length",
  "content-length",
  "CONTENT-LENGTH",
  "Transfer-Encoding",
  "transfer-encoding ",
  "Connection",
  "Keep-Alive",
  "TE",
  "te",
  "Trailer",
  "Upgrade",
  "Svc-Peer-ID",
  "Svc_Peer_ID",
  "svc-peer_id",
  "SVC_PEER-ID",
  "svc_peer_ids",
  "X-Forwarded-For",
  "x-request-id",
  "X-Request-Ids",
  "Proxy-Authorization",
  "proxy-",
  "proxy-a1",
  "Proxy-Connection",
  "proxy_x",
  "X_A",
  "^te",
  "T^",
  "",
  "a b",
]);
const value = fc.oneof(
  {
    arbitrary: pick([
      "",
      "x",
      " 5 ",
      "\t5\t",
      "chunked",
      "close, x-request-id",
      "0",
      "00",
      "1,1",
      "é",
      "\x80\xff",
    ]),
    weight: 6,
  },
  {
    arbitrary: fc
      .array(fc.oneof(odd, fc.string({ maxLength: 4 })), { maxLength: 4 })
      .map((xs) => xs.join("")),
    weight: 1,
  },
);
const sep = mostly([": ", ":", " :", ":\t", "::"]);
const field = fc.tuple(name, sep, value).map(([n, s, v]) => `${n}${s}${v}`);
const fieldLines = fc.array(field, { maxLength: 4 });

const requestLine = fc
  .tuple(
    mostly(["GET", "POST", "HEAD", "get", "M-SEARCH", "G\x00T", "", "CONNECT", "PRI"]),
    mostly([" ", "  ", "\t"]),
    mostly([
      "/",
      "/a?b=1",
      "/a b",
      "http://h/p",
      "https://h",
      "https:/",
      "HTTP://h",
      "h:443",
      "[::1]:8443",
      "h:",
      ":80",
      "h:123456",
      "*",
      "**",
      "/\x80",
      "/\x7f",
      "",
    ]),
    mostly([" ", "  "]),
    mostly(["HTTP/1.1", "HTTP/1.0", "HTTP/1.2", "http/1.1", "HTTP/1.1 ", "HTTP/2.0", "HTTP/1.10"]),
  )
  .map((xs) => xs.join(""));
const statusLine = fc
  .tuple(
    mostly(["HTTP/1.1", "HTTP/1.0", "HTTP/2", "http/1.1"]),
    mostly([" ", "  ", ""]),
    pick(["200", "404", "101", "99", "1000", "2x0", "204"]),
    pick(["", " OK", " ", " Not\x00Found", "OK", " a\tb", " é"]),
  )
  .map((xs) => xs.join(""));

/** A head from lines, then some mutations (a byte changed, inserted or removed), as latin1 bytes. */
const head = (start: fc.Arbitrary<string>) =>
  fc
    .tuple(
      start,
      fieldLines,
      mostly(["\r\n", "\n", "\r"]),
      fc.oneof(fc.constant([]), fc.array(fc.tuple(fc.nat(), fc.nat(2), odd), { maxLength: 3 })),
    )
    .map(([line, fields, eol, mutations]) => {
      let s = [line, ...fields].join(eol);
      for (const [at, kind, byte] of mutations) {
        const i = at % (s.length + 1);
        s =
          kind === 0
            ? s.slice(0, i) + byte + s.slice(i + 1)
            : kind === 1
              ? s.slice(0, i) + byte + s.slice(i)
              : s.slice(0, i) + s.slice(i + 1);
      }
      // A head ends at the first CRLFCRLF, as the framers find it.
      const whole = `${s}\r\n\r\n`;
      return Buffer.from(whole.slice(0, whole.indexOf("\r\n\r\n")), "latin1");
    });

const RUNS = 20_000;

describe("the byte reader of heads accepts only what the string reader accepts, read the same", () => {
  test("requests", () => {
    let accepted = 0;
    fc.assert(
      fc.property(head(requestLine), (b) => {
        // The head sits inside a larger buffer, as in a chunk with bytes before and after it.
        const src = Buffer.concat([Buffer.from("xx"), b, Buffer.from("\r\n\r\nGET")]);
        const p: HeadParts = emptyParts();
        if (!readRequestHead(src, 2, 2 + b.length, p)) return;
        accepted++;
        const text = readRequestText(src, 2, 2 + b.length);
        expect(text).toBeInstanceOf(RequestHead);
        const h = text as RequestHead;
        const fast = RequestHead.fromParts(p, src, 2, 2 + b.length);
        expect([fast.method, fast.target, fast.version, fast.special, fast.headers]).toEqual([
          h.method,
          h.target,
          h.version,
          h.special,
          h.headers,
        ]);
      }),
      { numRuns: RUNS },
    );
    // The generator is not all noise: a good share is accepted and so compared.
    expect(accepted).toBeGreaterThan(RUNS / 20);
  });

  test("responses", () => {
    let accepted = 0;
    fc.assert(
      fc.property(head(statusLine), (b) => {
        const src = Buffer.concat([Buffer.from("xx"), b, Buffer.from("\r\n\r\nHTTP")]);
        const fast: HeadParts = emptyParts();
        if (!readResponseHead(src, 2, 2 + b.length, fast)) return;
        accepted++;
        const slow = readResponseText(b.toString("latin1"), emptyParts());
        expect(typeof slow).toBe("object");
        const s = slow as HeadParts & { reasonText: string };
        const reason =
          fast.reasonStart < 0
            ? ""
            : b.toString("latin1", fast.reasonStart, b.indexOf("\r\n") < 0 ? b.length : b.indexOf("\r\n"));
        expect([fast.status, fast.version, fast.special, fast.from, reason]).toEqual([
          s.status,
          s.version,
          s.special,
          s.from,
          s.reasonText,
        ]);
      }),
      { numRuns: RUNS },
    );
    expect(accepted).toBeGreaterThan(RUNS / 20);
  });

  test("the common heads are read at the byte level", () => {
    const p = emptyParts();
    const req = Buffer.from("GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nX-Request-Id: r1");
    expect(readRequestHead(req, 0, req.length, p)).toBe(true);
    expect([p.method, p.version, p.special]).toEqual([
      "GET",
      "HTTP/1.1",
      [
        ["content-length", "5"],
        ["x-request-id", "r1"],
      ],
    ]);
    const res = Buffer.from("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked");
    expect(readResponseHead(res, 0, res.length, p)).toBe(true);
    expect([p.status, p.reasonStart, p.special]).toEqual([200, 13, [["transfer-encoding", "chunked"]]]);
  });
});
