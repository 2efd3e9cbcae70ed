import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { ResponseFramer, type ResponseHead } from "../../proxy/http/wire/response-framer.ts";
import type { BodyEvent, Event } from "../../proxy/http/wire/wire.ts";
import { framed } from "../support/framer-events.ts";

type ResponseEvent = Event<ResponseHead> | BodyEvent;

const bytes = (s: string) => new TextEncoder().encode(s);

/** Responses as framed: "status body" per end, "interim N", "tunnel", or the error. */
function summary(events: ResponseEvent[]): string[] {
  const out: string[] = [];
  let status = 0;
  let body = "";
  for (const e of events) {
    if (e.type === "head") {
      if (e.head.interim) out.push(`interim ${e.head.status}`);
      status = e.head.status;
      body = "";
    } else if (e.type === "body") body += new TextDecoder().decode(e.data);
    else if (e.type === "end") out.push(`${status} ${JSON.stringify(body)}`);
    else if (e.type === "tunnel") out.push(`${status} tunnel`);
    else out.push(`error ${e.status}: ${e.reason}`);
  }
  return out;
}

function frame(methods: string[], chunks: string[], close = false): string[] {
  const f = new ResponseFramer();
  for (const m of methods) f.expect(m);
  const events = chunks.flatMap((c) => framed<ResponseHead>((sink) => f.feed(bytes(c), sink)));
  return summary(close ? [...events, ...framed<ResponseHead>((sink) => f.closed(sink))] : events);
}

describe("HTTP/1.1 response framing", () => {
  test("Content-Length, chunked and close-delimited bodies", () => {
    expect(frame(["GET"], ["HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"])).toEqual(['200 "abc"']);
    expect(
      frame(["GET"], ["HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"]),
    ).toEqual(['201 "hi"']);
    expect(frame(["GET"], ["HTTP/1.0 200 OK\r\n\r\nuntil the end"], true)).toEqual(['200 "until the end"']);
  });

  test("no body after HEAD, 204 and 304, whatever the length fields say", () => {
    expect(
      frame(
        ["HEAD", "GET"],
        ["HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"],
      ),
    ).toEqual(['200 ""', '204 ""']);
    expect(frame(["GET"], ["HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"])).toEqual(['304 ""']);
  });

  test("1xx responses are interim; 101 and a 2xx to CONNECT end HTTP on the connection", () => {
    expect(
      frame(["POST"], ["HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]),
    ).toEqual(["interim 100", '200 "ok"']);
    expect(
      frame(["GET"], ["HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"]),
    ).toEqual(["101 tunnel"]);
    expect(frame(["CONNECT"], ["HTTP/1.1 200 Connection established\r\n\r\nraw"])).toEqual(["200 tunnel"]);
  });

  test("pipelined responses in the order of the requests, however the bytes are split", () => {
    const stream =
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst" +
      "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n" +
      "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nnope\r\n0\r\nX-T: 1\r\n\r\n";
    const methods = ["GET", "HEAD", "GET"];
    const whole = frame(methods, [stream]);
    expect(whole).toEqual(['200 "first"', '200 ""', '404 "nope"']);
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 1, max: stream.length - 1 }), { maxLength: 12 }),
        (cuts) => {
          const points = [0, ...cuts.sort((a, b) => a - b), stream.length];
          expect(
            frame(
              methods,
              points.slice(1).map((p, i) => stream.slice(points[i], p)),
            ),
          ).toEqual(whole);
        },
      ),
      { numRuns: 200 },
    );
  });

  test.each([
    [
      "a response nobody asked for",
      [],
      "HTTP/1.1 200 OK\r\n\r\n",
      false,
      "error 502: a response arrived without a request",
    ],
    [
      "an invalid status line",
      ["GET"],
      "HTTP/2 200\r\n\r\n",
      false,
      'error 502: invalid status line "HTTP/2 200"',
    ],
    [
      "Transfer-Encoding with Content-Length",
      ["GET"],
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
      false,
      "error 502: both Transfer-Encoding and Content-Length",
    ],
    [
      "a body cut short by the close",
      ["GET"],
      "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
      true,
      "error 502: connection closed before the end of the body",
    ],
    [
      "a head cut short by the close",
      ["GET"],
      "HTTP/1.1 200 OK\r\nContent-",
      true,
      "error 502: connection closed inside a response head",
    ],
  ])("%s is a 502", (_, methods, input, close, expected) => {
    expect(frame(methods as string[], [input], close as boolean).at(-1)).toBe(expected);
  });
});
