/**
 * The heads the relay writes, as bytes. Hop-by-hop fields, fields that Connection names, and the framing
 * fields are dropped; framing is written again from what the relay does with the body, so the peer sees
 * exactly one Content-Length or `Transfer-Encoding: chunked`. The fields the proxy adds (Svc-Peer-ID,
 * X-Request-Id, X-Forwarded-For) are added after the Connection-named ones are removed, so a caller's
 * Connection header cannot remove them, and a caller-supplied Svc-Peer-ID never passes.
 */
import {
  connectionTokens,
  FORWARDED_FOR_HEADER,
  forwardedFor,
  PEER_ID_HEADER,
  passesOn,
  REQUEST_ID_HEADER,
} from "../headers.ts";
import type { RequestHead } from "../wire/request-framer.ts";
import type { ResponseHead } from "../wire/response-framer.ts";
import { CONTENT_LENGTH, type Fields, type MessageHead } from "../wire/wire.ts";
import type { Outbox } from "./outbox.ts";

export type BodyOut = { kind: "none" } | { kind: "length"; length: number } | { kind: "chunked" };

/** The tokens of a relay head's Connection fields, lower case (`special`: names in lower case). */
export function namedByConnection(special: Fields): ReadonlySet<string> {
  let values: string[] | undefined;
  for (const [name, value] of special)
    if (name === "connection") {
      values ??= [];
      values.push(value);
    }
  return connectionTokens(values);
}

/** Writes the fields that pass on (headers.ts passesOn), but Content-Length, as lines into `out`. */
function writePassing(fields: Fields, named: ReadonlySet<string>, request: boolean, out: string[]): void {
  for (const [name, value] of fields) {
    const key = name.toLowerCase();
    // Content-Length is written again from what the relay does with the body (framingLine).
    if (key === "content-length" || !passesOn(key, named, request)) continue;
    out.push(name, ": ", value, "\r\n");
  }
}

function framingLine(body: BodyOut, out: string[]): void {
  if (body.kind === "length") out.push("content-length: ", String(body.length), "\r\n");
  else if (body.kind === "chunked") out.push("transfer-encoding: chunked\r\n");
}

export interface RequestAdditions {
  /** The authenticated caller, sent as Svc-Peer-ID (server and central modes). */
  peer: string | undefined;
  /** Set when the caller's X-Request-Id is not kept (none, or one its Connection field names). */
  requestId: string | undefined;
  remoteAddress: string;
}

/**
 * Whether a head can be passed on as received, with lines only added: HTTP/1.1, and no field to remove
 * (framing fields only in their plain single form, and nothing the proxy writes itself).
 */
function passable(special: Fields, version: string, keep: string): boolean {
  if (version !== "HTTP/1.1") return false;
  let lengths = 0;
  let codings = 0;
  for (const [name, value] of special) {
    if (name === "content-length" && CONTENT_LENGTH.test(value)) lengths++;
    else if (name === "transfer-encoding" && value.toLowerCase() === "chunked") codings++;
    else if (name !== keep) return false;
  }
  return lengths + codings <= 1;
}

/** The head as received, then the added lines, then the blank line, in one buffer. */
function extended(h: MessageHead, added: string): Uint8Array {
  const n = h.end - h.start;
  const out = Buffer.allocUnsafe(n + added.length + 4);
  h.src.copy(out, 0, h.start, h.end);
  out.write(`\r\n${added}\r\n`, n, "latin1");
  return out;
}

function has(special: Fields, key: string): boolean {
  return special.some(([name]) => name === key);
}

/** The request head sent upstream, always HTTP/1.1 and kept alive. */
export function requestHead(
  h: RequestHead,
  named: ReadonlySet<string>,
  body: BodyOut,
  add: RequestAdditions,
): Uint8Array {
  if (passable(h.special, h.version, REQUEST_ID_HEADER)) {
    let added = add.peer ? `${PEER_ID_HEADER}: ${add.peer}\r\n` : "";
    if (add.requestId) added += `${REQUEST_ID_HEADER}: ${add.requestId}\r\n`;
    return extended(h, `${added}${FORWARDED_FOR_HEADER}: ${add.remoteAddress}\r\n`);
  }
  const out: string[] = [h.method, " ", h.target, " HTTP/1.1\r\n"];
  const fields = h.headers; // parsed on each read
  let prior: string | undefined;
  if (!named.has(FORWARDED_FOR_HEADER))
    for (const [name, value] of fields)
      if (name.length === 15 && name.toLowerCase() === FORWARDED_FOR_HEADER)
        prior = prior === undefined ? value : `${prior}, ${value}`;
  writePassing(fields, named, true, out);
  if (add.peer) out.push(PEER_ID_HEADER, ": ", add.peer, "\r\n");
  if (add.requestId) out.push(REQUEST_ID_HEADER, ": ", add.requestId, "\r\n");
  out.push(FORWARDED_FOR_HEADER, ": ", forwardedFor(prior, add.remoteAddress), "\r\n");
  framingLine(body, out);
  out.push("\r\n");
  return Buffer.from(out.join(""), "latin1");
}

/**
 * The response head sent to the caller, added to `out`; `close` adds `Connection: close`. A head passed
 * on as received is added as the range of the buffer it arrived in (with the lines added after it).
 */
export function responseHead(h: ResponseHead, body: BodyOut, close: boolean, out: Outbox): void {
  if (h.interim && h.version === "HTTP/1.1" && h.special.length === 0) {
    out.addRange(h.src, h.start, h.end + 4);
    return;
  }
  if (!h.interim && passable(h.special, h.version, "")) {
    let added = close ? "connection: close\r\n" : "";
    if (body.kind === "chunked" && !has(h.special, "transfer-encoding"))
      added += "transfer-encoding: chunked\r\n";
    if (body.kind === "length" && !has(h.special, "content-length"))
      added += `content-length: ${body.length}\r\n`;
    if (body.kind !== "none" || !has(h.special, "transfer-encoding")) {
      // The received head ends in CRLFCRLF: its first CRLF ends the last field line.
      out.addRange(h.src, h.start, h.end + (added ? 2 : 4));
      if (added) out.addText(`${added}\r\n`);
      return;
    }
  }
  out.addText(slowResponseHead(h, body, close));
}

function slowResponseHead(h: ResponseHead, body: BodyOut, close: boolean): string {
  const out: string[] = ["HTTP/1.1 ", String(h.status), " ", h.reason, "\r\n"];
  writePassing(h.headers, namedByConnection(h.special), false, out);
  if (h.interim) {
    out.push("\r\n");
    return out.join("");
  }
  framingLine(body, out);
  if (close) out.push("connection: close\r\n");
  out.push("\r\n");
  return out.join("");
}

/** The size line of a chunk of `n` bytes (the chunk's data and CRLF follow). */
export const chunkSize = (n: number) => `${n.toString(16)}\r\n`;

export const LAST_CHUNK = "0\r\n\r\n";
