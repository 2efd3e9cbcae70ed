import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { type FramerEvent, RequestFramer, type RequestHead } from "../../proxy/http/wire/request-framer.ts";
import { framed } from "../support/framer-events.ts";

const bytes = (s: string) => new TextEncoder().encode(s);

/** Requests as the framer saw them: head summary and the whole body, one entry per "end"; errors as text. */
function requests(events: FramerEvent[]): string[] {
  const out: string[] = [];
  let current = "";
  let body = "";
  for (const e of events) {
    if (e.type === "head") {
      current = `${e.head.method} ${e.head.target} ${e.head.version} ${JSON.stringify(e.head.headers)}`;
      body = "";
    } else if (e.type === "body") body += new TextDecoder().decode(e.data);
    else if (e.type === "end") out.push(`${current} body=${JSON.stringify(body)}`);
    else if (e.type === "error") out.push(`error ${e.status}: ${e.reason}`);
  }
  return out;
}

/** What the framer delivers to its sink for `chunk`, as events. */
const push = (f: RequestFramer, chunk: string) => framed<RequestHead>((sink) => f.feed(bytes(chunk), sink));

const feed = (...chunks: string[]) => {
  const f = new RequestFramer(256);
  return requests(chunks.flatMap((c) => push(f, c)));
};

describe("HTTP/1.1 request framing", () => {
  test("the four request target forms are read", () => {
    const targets = feed(
      "GET /p HTTP/1.1\r\n\r\nGET http://h/p HTTP/1.1\r\n\r\nCONNECT h.example:443 HTTP/1.1\r\n\r\nOPTIONS * HTTP/1.1\r\n\r\n",
    ).map((r) => r.split(" ")[1]);
    expect(targets).toEqual(["/p", "http://h/p", "h.example:443", "*"]);
  });

  test("a request without a body ends at its head", () => {
    expect(feed("GET /a?b=1 HTTP/1.1\r\nHost: x\r\n\r\n")).toEqual([
      'GET /a?b=1 HTTP/1.1 [["Host","x"]] body=""',
    ]);
  });

  test("Content-Length bodies, pipelined requests, and header names and order as received", () => {
    expect(
      feed("POST /p HTTP/1.1\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhelloGET /next HTTP/1.0\r\n\r\n"),
    ).toEqual([
      'POST /p HTTP/1.1 [["Content-Length","5"],["X-A","1"]] body="hello"',
      'GET /next HTTP/1.0 [] body=""',
    ]);
  });

  test("chunked bodies with extensions and trailers", () => {
    const req =
      "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer-A: x\r\n\r\n";
    expect(feed(req)).toEqual(['POST /c HTTP/1.1 [["Transfer-Encoding","chunked"]] body="hello world"']);
  });

  test("empty lines before a request line are ignored; identical repeated Content-Length is accepted", () => {
    expect(feed("\r\n\r\nPUT / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok")).toEqual([
      'PUT / HTTP/1.1 [["Content-Length","2"],["Content-Length","2"]] body="ok"',
    ]);
  });

  test("any split of the byte stream yields the same requests", () => {
    const stream =
      "POST /1 HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world" +
      "GET /2 HTTP/1.1\r\nHost: y\r\n\r\n" +
      "POST /3 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n";
    const whole = feed(stream);
    expect(whole).toHaveLength(3);
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 1, max: stream.length - 1 }), { maxLength: 12 }),
        (cuts) => {
          const points = [0, ...cuts.sort((a, b) => a - b), stream.length];
          const chunks = points.slice(1).map((p, i) => stream.slice(points[i], p));
          expect(feed(...chunks)).toEqual(whole);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe("HTTP/1.1 request framing refuses what enables smuggling", () => {
  test.each([
    [
      "a NUL in a field value",
      "GET / HTTP/1.1\r\nX-A: a\u0000b\r\n\r\n",
      "error 400: control character in the value of header X-A",
    ],
    [
      "a DEL in a field value",
      "GET / HTTP/1.1\r\nX-A: a\u007fb\r\n\r\n",
      "error 400: control character in the value of header X-A",
    ],
    [
      "a control character in the request target",
      "GET /a\u0001b HTTP/1.1\r\n\r\n",
      'error 400: invalid request line "GET /a\\u0001b HTTP/1.1"',
    ],
    [
      "a request target that is none of the four forms",
      "GET a/b HTTP/1.1\r\n\r\n",
      'error 400: invalid request line "GET a/b HTTP/1.1"',
    ],
    [
      "Transfer-Encoding with Content-Length",
      "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
      "error 400: both Transfer-Encoding and Content-Length",
    ],
    [
      "a coding other than chunked",
      "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
      'error 501: unsupported Transfer-Encoding "gzip, chunked" (only chunked)',
    ],
    [
      "a non-numeric Content-Length",
      "POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n",
      'error 400: invalid Content-Length "1e3"',
    ],
    [
      "conflicting Content-Length values",
      "POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n",
      'error 400: invalid Content-Length "5, 6"',
    ],
    [
      "obsolete line folding",
      "GET / HTTP/1.1\r\nX-A: 1\r\n  continued\r\n\r\n",
      "error 400: obsolete line folding",
    ],
    [
      "whitespace before the colon",
      "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
      'error 400: invalid header line "Host : x"',
    ],
    ["a bare LF", "GET / HTTP/1.1\nHost: x\n\n", "error 400: bare LF line ending"],
    [
      "an HTTP/2 preface or other version",
      "PRI * HTTP/2.0\r\n\r\n",
      'error 400: invalid request line "PRI * HTTP/2.0"',
    ],
    [
      "an invalid chunk size",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      'error 400: invalid chunk size "zz"',
    ],
    [
      "chunk data without its CRLF",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
      "error 400: chunk data not followed by CRLF",
    ],
    [
      "a head larger than the limit",
      `GET / HTTP/1.1\r\nX-Big: ${"a".repeat(300)}\r\n\r\n`,
      "error 431: request head larger than 256 bytes",
    ],
  ])("%s", (_, input, expected) => {
    expect(feed(input)).toEqual([expected]);
  });

  test("nothing is parsed after an error, so no later request can be smuggled through", () => {
    const f = new RequestFramer();
    expect(
      requests(push(f, "POST / HTTP/1.1\r\nContent-Length: x\r\n\r\nGET /admin HTTP/1.1\r\n\r\n")),
    ).toEqual(['error 400: invalid Content-Length "x"']);
    expect(push(f, "GET /admin HTTP/1.1\r\n\r\n")).toEqual([]);
  });
});
