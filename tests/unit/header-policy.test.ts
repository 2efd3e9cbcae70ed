import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import http, { type IncomingHttpHeaders, type OutgoingHttpHeaders } from "node:http";
import { connect } from "node:net";
import { h2RequestFields } from "../../proxy/http/full/forward-h2.ts";
import {
  callerH2Fields as h2CallerFields,
  targetH2Fields,
  trailerH2Fields,
} from "../../proxy/http/h2-fields.ts";
import { connectionTokens, endToEnd, namedBy, requestFields, requestId } from "../../proxy/http/headers.ts";
import { type BodyOut, namedByConnection, requestHead, responseHead } from "../../proxy/http/relay/head.ts";
import { Outbox } from "../../proxy/http/relay/outbox.ts";
import type { ProxyRequest } from "../../proxy/http/types.ts";
import { emptyParts, readRequestHead, readResponseHead } from "../../proxy/http/wire/head-bytes.ts";
import { RequestHead, readRequestText } from "../../proxy/http/wire/request-framer.ts";
import { ResponseHead, readResponseText } from "../../proxy/http/wire/response-framer.ts";
import { type Framing, framing } from "../../proxy/http/wire/wire.ts";

/**
 * One header policy (proxy/http/headers.ts), every path: the same heads go through the relay's byte
 * reader, its string reader, the full path (node:http's parsed head) and the full path's HTTP/2 requests,
 * and each must pass on the same fields. Framing fields are left out of the comparison: each path writes
 * its own from what it does with the body. A change to one path alone makes its column differ.
 */
const PEER = "spiffe://example.org/ns/prod/sa/web";
const REMOTE = "10.0.0.7";
const NEW_ID = "id-from-the-proxy";

type Lines = [string, string][];
interface Row {
  name: string;
  fields: Lines;
  /** The fields the target gets, framing aside, in any order (same-named values joined with ", "). */
  out: Record<string, string>;
  /** How the HTTP/2 request differs: Host is :authority there, and TE passes as "trailers" only. */
  h2?: Record<string, string | undefined>;
}

const added = (id = NEW_ID, xff = REMOTE) => ({
  "svc-peer-id": PEER,
  "x-request-id": id,
  "x-forwarded-for": xff,
});

const requests: Row[] = [
  {
    name: "ordinary fields pass; the proxy's are added",
    fields: [
      ["Host", "api"],
      ["Accept", "*/*"],
    ],
    out: { host: "api", accept: "*/*", ...added() },
  },
  {
    name: "a caller's Svc-Peer-ID is replaced",
    fields: [
      ["Host", "api"],
      ["Svc-Peer-ID", "spiffe://example.org/ns/prod/sa/admin"],
    ],
    out: { host: "api", ...added() },
  },
  {
    name: "Svc-Peer-ID spelled with underscores never passes",
    fields: [
      ["Host", "api"],
      ["Svc_Peer_ID", "spiffe://example.org/ns/prod/sa/admin"],
      ["svc-peer_id", "spiffe://example.org/ns/prod/sa/admin"],
    ],
    out: { host: "api", ...added() },
  },
  {
    name: "hop-by-hop fields are dropped",
    fields: [
      ["Host", "api"],
      ["Connection", "keep-alive"],
      ["Keep-Alive", "timeout=5"],
      ["Proxy-Connection", "keep-alive"],
      ["Proxy-Authorization", "Basic eDp5"],
      ["TE", "trailers"],
      ["Trailer", "x-checksum"],
      ["Upgrade", "websocket"],
    ],
    out: { host: "api", ...added() },
    h2: { te: "trailers" },
  },
  // Each alone, so that no other field sends a reader's head down another road.
  ...[
    "Keep-Alive",
    "Proxy-Connection",
    "Proxy-Authenticate",
    "Proxy-Authentication-Info",
    "Proxy-Authorization",
    "Trailer",
    "Upgrade",
    "TE",
  ].map(
    (name): Row => ({
      name: `${name} alone is dropped`,
      fields: [
        ["Host", "api"],
        [name, name === "TE" ? "trailers" : "x"],
      ],
      out: { host: "api", ...added() },
      ...(name === "TE" ? { h2: { te: "trailers" } } : {}),
    }),
  ),
  {
    name: "fields that Connection names are dropped, whatever their case",
    fields: [
      ["Host", "api"],
      ["Connection", "X-Secret, close"],
      ["x-secret", "1"],
      ["X-Kept", "2"],
    ],
    out: { host: "api", "x-kept": "2", ...added() },
  },
  {
    name: "Connection cannot remove what the proxy adds",
    fields: [
      ["Host", "api"],
      ["Connection", "svc-peer-id, x-request-id"],
      ["X-Request-Id", "id-from-the-caller"],
    ],
    out: { host: "api", ...added() },
  },
  {
    name: "a caller's X-Request-Id is kept",
    fields: [
      ["Host", "api"],
      ["X-Request-Id", "id-from-the-caller"],
    ],
    out: { host: "api", ...added("id-from-the-caller") },
  },
  {
    name: "X-Forwarded-For is appended to",
    fields: [
      ["Host", "api"],
      ["X-Forwarded-For", "192.0.2.1"],
      ["X-Forwarded-For", "192.0.2.2"],
    ],
    out: { host: "api", ...added(NEW_ID, `192.0.2.1, 192.0.2.2, ${REMOTE}`) },
  },
  {
    name: "an X-Forwarded-For that Connection names is replaced",
    fields: [
      ["Host", "api"],
      ["Connection", "x-forwarded-for"],
      ["X-Forwarded-For", "192.0.2.1"],
    ],
    out: { host: "api", ...added() },
  },
  {
    name: "other proxy- fields pass; framing is each path's own",
    fields: [
      ["Host", "api"],
      ["Proxy-Trace", "on"],
      ["Content-Length", "0"],
    ],
    out: { host: "api", "proxy-trace": "on", ...added() },
  },
];

const FRAMING = new Set(["content-length", "transfer-encoding"]);

/** Fields of an HTTP/1.1 head as bytes, framing aside: same-named values joined, names lower case. */
function fieldsOf(head: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of head.toString("latin1").split("\r\n").slice(1)) {
    if (!line) continue;
    const colon = line.indexOf(":");
    const name = line.slice(0, colon).toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (FRAMING.has(name)) continue;
    out[name] = name in out ? `${out[name]}, ${value}` : value;
  }
  return out;
}

/** node:http's head objects, framing aside, values as one string each. */
function fieldsOfObject(h: OutgoingHttpHeaders): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(h))
    if (!FRAMING.has(k) && !k.startsWith(":") && v !== undefined)
      out[k] = Array.isArray(v) ? v.join(", ") : String(v);
  return out;
}

const requestText = (fields: Lines) =>
  Buffer.from(`GET /x HTTP/1.1\r\n${fields.map(([n, v]) => `${n}: ${v}\r\n`).join("")}\r\n`, "latin1");

const bodyOut = (f: Framing): BodyOut =>
  f.kind === "fixed"
    ? { kind: "length", length: f.length }
    : f.kind === "chunked"
      ? { kind: "chunked" }
      : { kind: "none" };

/** The relay's request head for the target, from a head read by `read`. */
function relayRequest(raw: Buffer, read: "bytes" | "text"): Record<string, string> {
  const end = raw.length - 4;
  let head: RequestHead;
  if (read === "bytes") {
    const p = emptyParts();
    expect(readRequestHead(raw, 0, end, p)).toBe(true);
    head = RequestHead.fromParts(p, raw, 0, end);
  } else {
    const h = readRequestText(raw, 0, end);
    if (!(h instanceof RequestHead)) throw new Error(h.error);
    head = h;
  }
  const f = framing(head.special, { kind: "none" });
  if ("error" in f) throw new Error(f.error);
  // As the relay's caller connection decides it: the caller's id is passed on as received, or a new one added.
  const named = namedByConnection(head.special);
  const callerId = head.special.find(([n]) => n === "x-request-id")?.[1];
  const out = requestHead(head, named, bodyOut(f), {
    peer: PEER,
    requestId: requestId(callerId, named) === callerId ? undefined : NEW_ID,
    remoteAddress: REMOTE,
  });
  return fieldsOf(Buffer.from(out));
}

/** node:http's parse of each raw head (the full path's input), by a real server on loopback. */
let server: http.Server;
let port = 0;
const parsed = new Map<string, IncomingHttpHeaders>();
beforeAll(async () => {
  server = http.createServer((req, res) => {
    parsed.set(String(req.headers["x-row"]), req.headers);
    res.end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  port = (server.address() as { port: number }).port;
});
afterAll(() => server.close());

async function nodeHeaders(row: Row, index: number): Promise<IncomingHttpHeaders> {
  const raw = requestText([
    ...row.fields.filter(([n]) => n.toLowerCase() !== "connection"),
    ["X-Row", String(index)],
  ]);
  // Connection goes last, as "close", so that the one exchange ends; the row's own Connection values are
  // sent too, as node:http keeps them joined.
  const conn = row.fields.filter(([n]) => n.toLowerCase() === "connection").map(([, v]) => v);
  const text = raw
    .toString("latin1")
    .replace(/\r\n\r\n$/, `\r\nConnection: ${[...conn, "close"].join(", ")}\r\n\r\n`);
  await new Promise<void>((resolve, reject) => {
    const s = connect(port, "127.0.0.1", () => s.end(text, "latin1"));
    s.on("data", () => {});
    s.on("close", () => resolve());
    s.on("error", reject);
  });
  const h = parsed.get(String(index));
  if (!h) throw new Error("node:http did not see the request");
  delete h["x-row"];
  return h;
}

// As the full path's listener decides the id: the caller's, or a new one.
const idOf = (headers: IncomingHttpHeaders) => {
  const callerId = headers["x-request-id"] as string | undefined;
  return requestId(callerId, namedBy(headers)) === callerId ? (callerId as string) : NEW_ID;
};
const proxyRequest = (headers: IncomingHttpHeaders): ProxyRequest =>
  ({
    id: idOf(headers),
    headers,
    peer: { uri: PEER },
    remoteAddress: REMOTE,
  }) as unknown as ProxyRequest;

// The RFC's list, written out here so that the expectation does not come from the code under test.
const CONNECTION_SPECIFIC = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"];

/** The row as an HTTP/2 caller sends it (Host as :authority, names in lower case), through h2-fields.ts. */
function fromH2Caller(fields: Lines): Record<string, string> | "malformed" {
  const h2 = [
    { name: ":method", value: "GET" },
    { name: ":scheme", value: "http" },
    { name: ":path", value: "/x" },
    ...fields.map(([n, v]) =>
      n === "Host" ? { name: ":authority", value: v } : { name: n.toLowerCase(), value: v },
    ),
  ];
  const r = h2CallerFields(h2, {
    peer: PEER,
    newRequestId: () => ({ name: "x-request-id", value: NEW_ID }),
    remoteAddress: REMOTE,
  });
  if ("malformed" in r) return "malformed";
  const out: Record<string, string> = {};
  for (const f of [...r.fields, r.requestId])
    if (!f.name.startsWith(":") && !FRAMING.has(f.name))
      out[f.name] = f.name in out ? `${out[f.name]}, ${f.value}` : f.value;
  return out;
}

describe("one header policy: requests, on every path", () => {
  requests.forEach((row, i) => {
    test(row.name, async () => {
      const raw = requestText(row.fields);
      const headers = await nodeHeaders(row, i);
      const h2Expected = Object.fromEntries(
        Object.entries({ ...row.out, ...row.h2 }).filter(([k, v]) => k !== "host" && v !== undefined),
      ) as Record<string, string>;
      expect({
        "relay, byte reader": relayRequest(raw, "bytes"),
        "relay, string reader": relayRequest(raw, "text"),
        "full path": fieldsOfObject(requestFields(proxyRequest({ ...headers }))),
        "full path, HTTP/2": fieldsOfObject(h2RequestFields(proxyRequest({ ...headers }))),
        "an HTTP/2 caller": fromH2Caller(row.fields),
      }).toEqual({
        "relay, byte reader": row.out,
        "relay, string reader": row.out,
        "full path": row.out,
        "full path, HTTP/2": h2Expected,
        // HTTP/2 has no Connection: a request with a connection-specific field is malformed (RFC 9113 8.2.2).
        "an HTTP/2 caller": row.fields.some(([n]) => CONNECTION_SPECIFIC.includes(n.toLowerCase()))
          ? "malformed"
          : h2Expected,
      });
    });
  });
});

const responses: { name: string; fields: Lines; out: Record<string, string> }[] = [
  {
    name: "ordinary fields pass, Svc-Peer-ID too (only requests carry the proxy's)",
    fields: [
      ["Content-Type", "text/plain"],
      ["Svc-Peer-ID", "spiffe://example.org/ns/prod/sa/api"],
    ],
    out: { "content-type": "text/plain", "svc-peer-id": "spiffe://example.org/ns/prod/sa/api" },
  },
  {
    name: "hop-by-hop fields and the ones Connection names are dropped",
    fields: [
      ["Connection", "x-internal"],
      ["X-Internal", "1"],
      ["Keep-Alive", "timeout=5"],
      ["Upgrade", "h2c"],
      ["Trailer", "x-checksum"],
      ["Proxy-Authenticate", "Basic"],
      ["X-Kept", "2"],
    ],
    out: { "x-kept": "2" },
  },
];

/** The relay's response head for the caller, from a head read by `read`. */
function relayResponse(fields: Lines, read: "bytes" | "text"): Record<string, string> {
  const raw = Buffer.from(
    `HTTP/1.1 200 OK\r\n${[...fields, ["Content-Length", "0"]].map(([n, v]) => `${n}: ${v}\r\n`).join("")}\r\n`,
    "latin1",
  );
  const end = raw.length - 4;
  const p = emptyParts() as ReturnType<typeof emptyParts> & { reasonText?: string };
  if (read === "bytes") expect(readResponseHead(raw, 0, end, p)).toBe(true);
  else expect(readResponseText(raw.toString("latin1", 0, end), p)).toBe(p);
  const h = new ResponseHead(
    p.status,
    p.reasonText,
    p.reasonStart,
    p.version,
    p.special,
    raw,
    0,
    end,
    false,
    { kind: "none" },
    p.from,
  );
  const written: Uint8Array[] = [];
  // As a Bun socket writes: the octets are taken (sent or copied) before write returns.
  const socket = {
    write(b: Uint8Array, offset = 0, length = b.length - offset) {
      written.push(b.slice(offset, offset + length));
      return length;
    },
  };
  const out = new Outbox(socket as never);
  responseHead(h, { kind: "length", length: 0 }, false, out);
  out.flush();
  return fieldsOf(Buffer.concat(written));
}

describe("one header policy: responses, on every path", () => {
  for (const row of responses)
    test(row.name, () => {
      const asNode: OutgoingHttpHeaders = {};
      for (const [n, v] of row.fields) asNode[n.toLowerCase()] = v;
      expect({
        "relay, byte reader": relayResponse(row.fields, "bytes"),
        "relay, string reader": relayResponse(row.fields, "text"),
        "full path": fieldsOfObject(endToEnd(asNode, false)),
      }).toEqual({
        "relay, byte reader": row.out,
        "relay, string reader": row.out,
        "full path": row.out,
      });
    });
});

test("connectionTokens: one reading of Connection for every path", () => {
  expect([...connectionTokens(["Close, X-A", " x-b ,"])]).toEqual(["close", "x-a", "x-b"]);
  expect([
    ...namedByConnection([
      ["connection", "Close, X-A"],
      ["connection", "x-b"],
    ]),
  ]).toEqual(["close", "x-a", "x-b"]);
});

describe("HTTP/2 callers: RFC 9113's own rules come first (h2-fields.ts)", () => {
  type Field = { name: string; value: string };
  const base: [Field, Field, Field, Field] = [
    { name: ":method", value: "POST" },
    { name: ":scheme", value: "https" },
    { name: ":path", value: "/svc.Echo/Say" },
    { name: ":authority", value: "api" },
  ];
  const check = (fields: { name: string; value: string }[]) =>
    h2CallerFields(fields, {
      peer: PEER,
      newRequestId: () => ({ name: "x-request-id", value: NEW_ID }),
      remoteAddress: REMOTE,
    });
  test.each<[string, Field[], string]>([
    ["a name in upper case", [...base, { name: "X-A", value: "1" }], "not in lower case"],
    [
      "a pseudo-header after a regular field",
      [base[0], { name: "x-a", value: "1" }, ...base.slice(1)],
      "after a regular field",
    ],
    [
      "a pseudo-header a request does not have",
      [...base.slice(0, 3), { name: ":status", value: "200" }],
      "not a request's",
    ],
    ["a pseudo-header twice", [...base, { name: ":path", value: "/b" }], "twice"],
    ["no :path", base.filter((f) => f.name !== ":path"), "no :scheme or no :path"],
    ["te other than trailers", [...base, { name: "te", value: "gzip" }], 'only "trailers"'],
    ["a value with CR LF", [...base, { name: "x-a", value: "1\r\nx-b: 2" }], "0x0d"],
    ["a value with LF", [...base, { name: "x-a", value: "1\nx-b: 2" }], "0x0a"],
    ["a value with NUL", [...base, { name: "x-a", value: "1\u0000" }], "0x00"],
    ["a pseudo-header's value with CR", [...base.slice(0, 2), { name: ":path", value: "/a\r" }], "0x0d"],
    ["a value ending in a space", [...base, { name: "x-a", value: "1 " }], "space or tab"],
    ["a value starting with a tab", [...base, { name: "x-a", value: "\t1" }], "space or tab"],
    ["a name with a space", [...base, { name: "x a", value: "1" }], "0x20"],
    ["a name with a colon inside", [...base, { name: "x:a", value: "1" }], "0x3a"],
    ["a name with a control character", [...base, { name: "x\u0001", value: "1" }], "0x01"],
    ["a name past ASCII", [...base, { name: "x\u00e9", value: "1" }], "0xe9"],
    ["an empty name", [...base, { name: "", value: "1" }], "empty field name"],
    ["a name that is one colon", [...base, { name: ":", value: "1" }], "empty field name"],
    [
      "CONNECT",
      [
        { name: ":method", value: "CONNECT" },
        { name: ":authority", value: "db:5432" },
      ],
      "CONNECT",
    ],
    ...[
      ["a :path without its slash", "POST", "svc.Echo/Say"],
      ["* for a method other than OPTIONS", "GET", "*"],
      ["a :path in absolute form", "GET", "http://other/x"],
      ["a :path with a space", "GET", "/a b"],
      ["a :path with a control character", "GET", "/a\u0001b"],
      ["a :path with DEL", "GET", "/a\u007fb"],
      ["a :method with a space", "G T", "/"],
      ["a :method with a slash", "GET/", "/"],
    ].map(([what, method, path]): [string, Field[], string] => [
      what as string,
      [
        { name: ":method", value: method as string },
        base[1],
        { name: ":path", value: path as string },
        base[3],
      ],
      ":path",
    ]),
    [
      "a :scheme other than http or https",
      [base[0], { name: ":scheme", value: "ftp" }, ...base.slice(2)],
      ":scheme",
    ],
    [
      "an :authority with userinfo",
      [...base.slice(0, 3), { name: ":authority", value: "user:pw@api" }],
      "userinfo",
    ],
    ["an :authority with a path", [...base.slice(0, 3), { name: ":authority", value: "api/x" }], "userinfo"],
    ["a host other than :authority", [...base, { name: "host", value: "other" }], "differs from :authority"],
    [
      "host twice",
      [...base.slice(0, 3), { name: "host", value: "a" }, { name: "host", value: "b" }],
      "host twice",
    ],
    [
      "a content-length that is no number",
      [...base, { name: "content-length", value: "5x" }],
      "Content-Length",
    ],
    [
      "content-length values that differ",
      [...base, { name: "content-length", value: "5" }, { name: "content-length", value: "6" }],
      "Content-Length",
    ],
  ])("%s is malformed", (_, fields, why) => {
    const r = check(fields as { name: string; value: string }[]);
    expect("malformed" in r ? r.malformed : r).toContain(why);
  });
  test("the target forms RFC 9113 allows pass: OPTIONS *, a query, octets past ASCII; a host like :authority; the content length is read", () => {
    const ok = (fields: { name: string; value: string }[]) => {
      const r = check(fields);
      if ("malformed" in r) throw new Error(r.malformed);
      return r;
    };
    ok([{ name: ":method", value: "OPTIONS" }, base[1], { name: ":path", value: "*" }, base[3]]);
    ok([base[0], base[1], { name: ":path", value: "/a?b=c&d=%20#x\u00e9" }, base[3]]);
    ok([base[0], base[1], base[2], { name: ":authority", value: "[::1]:8443" }]);
    ok([base[0], base[1], base[2], { name: "host", value: "api.example:80" }]);
    expect(ok([...base, { name: "host", value: "API" }]).contentLength).toBe(-1);
    expect(ok([...base, { name: "content-length", value: "0" }]).contentLength).toBe(0);
    expect(
      ok([...base, { name: "content-length", value: "12" }, { name: "content-length", value: "12" }])
        .contentLength,
    ).toBe(12);
  });
  test("values with inner spaces, tabs and any other octet pass; an empty value passes", () => {
    const r = check([...base, { name: "x-a", value: "a\tb c\u00ff\u0001" }, { name: "x-b", value: "" }]);
    expect("fields" in r && r.fields.slice(4, 6)).toEqual([
      { name: "x-a", value: "a\tb c\u00ff\u0001" },
      { name: "x-b", value: "" },
    ]);
  });
  test("a target's response head and trailers are held to the same characters", () => {
    const status = { name: ":status", value: "200" };
    expect(targetH2Fields([status, { name: "x-a", value: "1\r\nset-cookie: a=b" }])).toEqual({
      malformed: "field x-a: its value holds 0x0d (NUL, LF and CR are not allowed)",
    });
    expect(targetH2Fields([status, { name: "X-A", value: "1" }])).toEqual({
      malformed: 'field name "X-A" is not in lower case',
    });
    expect(trailerH2Fields([{ name: "grpc-message", value: "a\u0000" }], false)).toEqual({
      malformed: "field grpc-message: its value holds 0x00 (NUL, LF and CR are not allowed)",
    });
    expect(trailerH2Fields([{ name: "grpc-status", value: "0" }], false)).toEqual({
      fields: [{ name: "grpc-status", value: "0" }],
    });
  });
  test("a gRPC request: te: trailers and the caller's X-Request-Id kept, the proxy's fields added", () => {
    const r = check([
      ...base,
      { name: "te", value: "trailers" },
      { name: "content-type", value: "application/grpc" },
      { name: "x-request-id", value: "id-from-the-caller" },
      { name: "svc_peer_id", value: "spiffe://example.org/ns/prod/sa/admin" },
    ]);
    expect(r).toEqual({
      requestId: { name: "x-request-id", value: "id-from-the-caller" },
      contentLength: -1,
      fields: [
        ...base,
        { name: "te", value: "trailers" },
        { name: "content-type", value: "application/grpc" },
        { name: "svc-peer-id", value: PEER },
        { name: "x-forwarded-for", value: REMOTE },
      ],
    });
  });
});
