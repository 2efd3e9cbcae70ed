/**
 * How the HTTP/2 relay reconciles the two sides' SETTINGS (docs/proxy-http.md, "The HTTP/2 relay"). The
 * proxy is an endpoint of each connection, so every SETTINGS frame is read and answered by it; what each
 * value means decides what becomes of it:
 *
 * - per hop, the proxy's own: HEADER_TABLE_SIZE (the proxy decodes with a table of 4,096 octets; what a
 *   side announces bounds the proxy's encoder toward it), MAX_HEADER_LIST_SIZE (announced to both sides
 *   and held while decoding), MAX_FRAME_SIZE (the default 16,384 announced to both, so that every DATA
 *   frame one side may send fits the other and passes on unchanged; header blocks are split to it), and
 *   ENABLE_PUSH (0 to the target: a PUSH_PROMISE is a protocol error);
 * - end to end, relayed in a SETTINGS frame of the proxy's to the other side: INITIAL_WINDOW_SIZE both
 *   ways (flow control passes through, as DATA and WINDOW_UPDATE frames do), at most MAX_RELAYED_WINDOW,
 *   and the target's MAX_CONCURRENT_STREAMS to the caller, at most MAX_STREAMS. The side that announced
 *   them is sent its ACK only once the other side has acknowledged the relayed frame, so that neither
 *   side counts on a window the other has not taken on (RFC 9113 section 6.9.3).
 *
 * ACKs go back in the order the SETTINGS frames came, as the RFC requires.
 */
import { SETTING } from "../../../lib/http2/frames.ts";
import { DEFAULT_TABLE_SIZE } from "../../../lib/http2/hpack.ts";

/** Concurrent streams per caller connection. */
export const MAX_STREAMS = 100;
/** The largest header list either side may send (decoded size, RFC 9113 section 6.5.2). */
export const MAX_HEADER_LIST = 64 * 1024;
/** The largest header block (encoded) read before it is refused, CONTINUATION frames included. */
export const MAX_HEADER_BLOCK = 2 * MAX_HEADER_LIST;
/** The largest initial stream window relayed from one side to the other. */
const MAX_RELAYED_WINDOW = 16 * 1024 * 1024;

/** What the proxy announces to the caller first, before it knows the target's. */
export const CALLER_SETTINGS: ReadonlyMap<number, number> = new Map([
  [SETTING.MAX_CONCURRENT_STREAMS, MAX_STREAMS],
  [SETTING.MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST],
]);
/** What the proxy announces to the target first. */
export const TARGET_SETTINGS: ReadonlyMap<number, number> = new Map([
  [SETTING.ENABLE_PUSH, 0],
  [SETTING.MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST],
]);

/** A SETTINGS frame a side sent, until the proxy may acknowledge it. */
interface Owed {
  ready: boolean;
}

export interface SettingsSide {
  /** The SETTINGS frames this side sent that await the proxy's ACK, in order. */
  owed: Owed[];
  /** The SETTINGS frames the proxy sent this side that await its ACK: a relayed one names what it owes. */
  sent: (Owed | undefined)[];
}

export const newSide = (): SettingsSide => ({ owed: [], sent: [] });

/** Of a side's SETTINGS, the values relayed to the other side (none: undefined). */
export function relayed(values: ReadonlyMap<number, number>, from: "caller" | "target") {
  let out: Map<number, number> | undefined;
  const window = values.get(SETTING.INITIAL_WINDOW_SIZE);
  if (window !== undefined) {
    out = new Map();
    out.set(SETTING.INITIAL_WINDOW_SIZE, Math.min(window, MAX_RELAYED_WINDOW));
  }
  const streams = values.get(SETTING.MAX_CONCURRENT_STREAMS);
  if (from === "target" && streams !== undefined) {
    out ??= new Map();
    out.set(SETTING.MAX_CONCURRENT_STREAMS, Math.min(streams, MAX_STREAMS));
  }
  return out;
}

/** The table size the proxy's encoder toward a side may use, once it announced HEADER_TABLE_SIZE. */
export const encoderTableSize = (announced: number): number => Math.min(announced, DEFAULT_TABLE_SIZE);

/**
 * A SETTINGS frame arrived from `from`: it is owed an ACK, at once when nothing is relayed, else when
 * `to` acknowledges the relayed frame (which the caller sends). Returns the ACKs `from` may be sent now.
 */
export function settingsArrived(from: SettingsSide, to: SettingsSide, relaying: boolean): number {
  const owed: Owed = { ready: !relaying };
  from.owed.push(owed);
  if (relaying) to.sent.push(owed);
  return acksDue(from);
}

/** `side` acknowledged a SETTINGS frame of the proxy's: returns the ACKs now due to the other side. */
export function ackArrived(side: SettingsSide, other: SettingsSide): number {
  const owed = side.sent.shift();
  if (!owed) return 0;
  owed.ready = true;
  return acksDue(other);
}

function acksDue(side: SettingsSide): number {
  let n = 0;
  while (side.owed[0]?.ready) {
    side.owed.shift();
    n++;
  }
  return n;
}
