/**
 * One HTTP/2 caller connection of the relay and its own connection to the target (docs/proxy-http.md,
 * "The HTTP/2 relay"). The proxy opens no streams of its own: a caller's stream is the same stream at the
 * target, with the same identifier, so flow control and priorities pass through. Frames are read as far
 * as their 9-octet header and passed on as the bytes they arrived in (DATA, WINDOW_UPDATE, PING,
 * RST_STREAM, PRIORITY, GOAWAY), except:
 *
 * - header blocks (HEADERS and CONTINUATION), decoded, put through the header policy (h2-fields.ts) and
 *   encoded again for the other side;
 * - SETTINGS, which the proxy answers itself (settings.ts);
 * - frames of a stream the proxy answered or ended itself, which the other side never saw or has closed:
 *   dropped, their DATA credited back to the sender's connection window.
 *
 * Each stream is one request in the metrics. The connection to the target lives and dies with the
 * caller's: when either ends, so does the other, after the streams that can finish have.
 */
import type { Socket } from "bun";
import { SvcError } from "../../../lib/errors.ts";
import {
  checkData,
  checkPing,
  checkPriority,
  DEFAULT_MAX_FRAME_SIZE,
  dependsOnItself,
  ERROR,
  FLAG,
  FRAME,
  type Frame,
  FrameReader,
  type FrameSink,
  frame,
  frameHeader,
  goAway,
  H2Error,
  type HeaderBlock,
  HeaderBlocks,
  headerFrames,
  PREFACE,
  readGoAway,
  readRstStream,
  readSettings,
  readWindowUpdate,
  rstStream,
  SETTING,
  settingsFrame,
  windowUpdate,
  writeFrameHeader,
} from "../../../lib/http2/frames.ts";
import {
  type HeaderField,
  HeaderListTooLarge,
  HpackDecoder,
  HpackEncoder,
  HpackError,
} from "../../../lib/http2/hpack.ts";
import type { VerifiedPeer } from "../../../lib/spiffe/x509svid.ts";
import { requestTimedOut, targetTimedOut } from "../../timeouts.ts";
import { CALLER_CLOSED } from "../cancelled.ts";
import { countRefusal, upstreamFailure } from "../failure.ts";
import { budget, CONTROL_BURST, CONTROL_RATE, type H2Abuse, RESET_BURST, RESET_RATE } from "../h2-abuse.ts";
import { callerH2Fields, targetH2Fields, trailerH2Fields } from "../h2-fields.ts";
import { REQUEST_ID_HEADER } from "../headers.ts";
import { HIGH_WATER, Outbox } from "../relay/outbox.ts";
import { closedEarly } from "../relay/target.ts";
import { proxyResponse } from "../types.ts";
import { BlockCache } from "./block-cache.ts";
import type { H2Context } from "./context.ts";
import { type KeptRequest, type Lookup, RequestCache } from "./request-cache.ts";
import {
  ackArrived,
  CALLER_SETTINGS,
  encoderTableSize,
  MAX_HEADER_BLOCK,
  MAX_HEADER_LIST,
  MAX_STREAMS,
  newSide,
  relayed,
  settingsArrived,
  TARGET_SETTINGS,
} from "./settings.ts";

/** How long a closing connection may take to write what is left (a GOAWAY, final answers). */
const CLOSE_GRACE_MS = 1000;
/** Streams answered or ended by the proxy whose late frames are still recognised, per side. */
const MAX_DROPPED = 1024;
/** Runs of skipped stream identifiers remembered (see H2Relay.skipped). */
const MAX_SKIPPED = 64;
/** The frame size the relay announces to both sides (the default), and splits header blocks to. */
const MAX_FRAME = DEFAULT_MAX_FRAME_SIZE;
/** Fields whose values differ in every message: sent as literals, so that they do not crowd the table. */
const UNIQUE_PER_MESSAGE: ReadonlySet<string> = new Set([REQUEST_ID_HEADER]);
const SHORT_BODY = "a request ended short of its content-length";

interface Stream {
  id: number;
  requestId: string;
  method: string;
  path: string;
  started: number;
  /** The final status the target answered (0 until then). */
  status: number;
  bytesIn: number;
  bytesOut: number;
  /** What is left of the request's Content-Length (-1: none given); DATA beyond it, or short of it, is malformed. */
  bodyLeft: number;
  /** The caller ended its side (END_STREAM). */
  callerEnded: boolean;
  /** The target ended its side (END_STREAM). */
  targetEnded: boolean;
  /** When timeouts.read (until callerEnded), then timeouts.write (until targetEnded) runs out. */
  deadline: number;
}

type Side = "caller" | "target";

export class H2Relay {
  deadline: number;
  closed = false;
  private readonly callerOut: Outbox;
  private targetOut: Outbox | undefined;
  private target: Socket<H2Relay> | undefined;
  /** What was to be sent to the target before its connection was ready. */
  private pending: Uint8Array[] | undefined = [];
  private pendingBytes = 0;
  private dialled = false;
  private readonly callerFrames = new FrameReader(MAX_FRAME, true);
  private readonly targetFrames = new FrameReader(MAX_FRAME);
  private readonly callerBlocks = new HeaderBlocks(MAX_HEADER_BLOCK);
  private readonly targetBlocks = new HeaderBlocks(MAX_HEADER_BLOCK);
  private readonly fromCaller = new HpackDecoder({ maxHeaderListSize: MAX_HEADER_LIST });
  private readonly fromTarget = new HpackDecoder({ maxHeaderListSize: MAX_HEADER_LIST });
  private readonly toCaller = new HpackEncoder({ literalNames: UNIQUE_PER_MESSAGE });
  private readonly toTarget = new HpackEncoder({ literalNames: UNIQUE_PER_MESSAGE });
  /** The caller's last request head, as passed on (request-cache.ts). */
  private readonly requests = new RequestCache(this.fromCaller, this.toTarget, MAX_HEADER_LIST);
  /** The target's last final response head and last trailers, as passed on (block-cache.ts): the status. */
  private readonly responseHeads = new BlockCache<number>(this.fromTarget, this.toCaller);
  private readonly trailers = new BlockCache<number>(this.fromTarget, this.toCaller);
  private readonly callerSettings = newSide();
  private readonly targetSettings = newSide();
  private readonly streams = new Map<number, Stream>();
  /** Streams whose later frames from that side are dropped (the proxy answered or ended them). */
  private readonly dropFromCaller = new Set<number>();
  private readonly dropFromTarget = new Set<number>();
  /**
   * Stream identifiers the caller skipped (first and last of each run, the latest MAX_SKIPPED runs): a
   * HEADERS below the last stream is on one of these (opened out of order: PROTOCOL_ERROR) or on a stream
   * that was open once (STREAM_CLOSED). Callers number their streams one after another, so this is
   * nearly always empty, and costs nothing per stream.
   */
  private readonly skipped: [number, number][] = [];
  /** PINGs each side sent that the other has not acknowledged yet: an ACK nobody asked for is dropped. */
  private callerPings = 0;
  private targetPings = 0;
  private lastStream = 0;
  /** The highest stream the target has been sent. */
  private lastForwarded = 0;
  private readonly controls = budget(CONTROL_BURST, CONTROL_RATE);
  private readonly resets = budget(RESET_BURST, RESET_RATE);
  private preface = true;
  /** A GOAWAY was sent to the caller (drain, rotation, an ended target): no new streams. */
  private goingAway = false;
  /** The connection ends once what is queued to the caller has been written. */
  private closing = false;
  private callerPaused = false;
  private targetPaused = false;
  private lastActive = Date.now();
  /** When the caller's open header block must have ended (while callerBlocks.open). */
  private blockDeadline = 0;
  /** When the caller's verified certificate chain, or the target connection's, stops being valid. */
  private validUntil: number;
  /**
   * When the chunk being read arrived (Date.now() and performance.now()): read once per chunk, not once
   * per stream, and used by what the chunk's frames do (stamp()).
   */
  private now = 0;
  private nowMono = 0;

  constructor(
    readonly socket: Socket<unknown>,
    private readonly ctx: H2Context,
    readonly peer: VerifiedPeer | undefined,
  ) {
    this.callerOut = new Outbox(socket);
    this.validUntil = peer ? peer.notAfter.getTime() : Number.POSITIVE_INFINITY;
    // The preface (and the caller's first SETTINGS) must arrive within timeouts.read.
    this.deadline = Date.now() + ctx.timeouts.readMs;
    this.sendCaller(settingsFrame(CALLER_SETTINGS));
    this.callerSettings.sent.push(undefined);
    this.callerOut.flush();
  }

  /** The target is reached over TLS: its connection is ready after the handshake, not when it opens. */
  get tlsTarget(): boolean {
    return this.ctx.target.tls;
  }

  /** True while no stream is open, so that a drain may close the connection now. */
  get idle(): boolean {
    return this.streams.size === 0;
  }

  // ---- the caller's side ----

  received(data: Uint8Array): void {
    if (this.closing) return;
    this.readChunk("caller", data);
  }

  /**
   * Handles the frames of a chunk one side sent, then writes what they made. An error of one stream ends
   * that stream, not the frames after it: each is read (so that both HPACK tables stay in step) and passed
   * on, until a connection error ends the connection. The frames (and a header block in one frame) are
   * objects the reader reuses: once handled, they let go of the chunk.
   */
  private readChunk(from: Side, data: Uint8Array): void {
    const caller = from === "caller";
    const reader = caller ? this.callerFrames : this.targetFrames;
    this.stamp();
    let frames = NO_FRAMES;
    try {
      frames = reader.read(data);
    } catch (e) {
      this.failed(from, e);
    }
    for (const f of frames) {
      try {
        if (caller) this.fromCallerFrame(f);
        else this.fromTargetFrame(f);
      } catch (e) {
        this.failed(from, e);
      }
      if (this.closing || (!caller && (this.closed || !this.target))) break;
    }
    reader.release();
    (caller ? this.callerBlocks : this.targetBlocks).release();
    this.flushBoth();
  }

  private failed(from: Side, e: unknown): void {
    if (from === "caller") this.callerError(e);
    else this.targetProtocolError(e);
  }

  private fromCallerFrame(f: Frame): void {
    if (this.preface) {
      if (f.type !== FRAME.SETTINGS || f.flags & FLAG.ACK)
        throw new H2Error(ERROR.PROTOCOL_ERROR, "the client preface is not followed by SETTINGS");
      this.preface = false;
      this.deadline = this.idleDeadline();
      this.dial();
    }
    const block = this.callerBlocks.take(f);
    if (block) {
      this.callerHeaders(block);
      return;
    }
    if (f.type === FRAME.HEADERS) {
      // A head is a request's: the block must end within timeouts.read, like the rest of the request.
      this.blockDeadline = this.now + this.ctx.timeouts.readMs;
      this.deadline = Math.min(this.deadline, this.blockDeadline);
      return;
    }
    if (f.type === FRAME.CONTINUATION) return;
    switch (f.type) {
      case FRAME.DATA: {
        const n = checkData(f);
        const s = this.streams.get(f.stream);
        if (!s || s.callerEnded) {
          this.strayFromCaller(f);
          return;
        }
        const end = (f.flags & FLAG.END_STREAM) !== 0;
        if (s.bodyLeft >= 0) {
          s.bodyLeft -= n;
          if (s.bodyLeft < 0 || (end && s.bodyLeft > 0)) {
            // Not passed on (section 8.1.1): the credit it took is returned, the stream reset both ways.
            if (f.length > 0) this.sendCaller(windowUpdate(0, f.length));
            throw new H2Error(
              ERROR.PROTOCOL_ERROR,
              "DATA that does not match the request's content-length",
              s.id,
            );
          }
        }
        s.bytesIn += f.length;
        this.passToTarget(f);
        if (end) this.callerEnded(s);
        return;
      }
      case FRAME.RST_STREAM: {
        readRstStream(f);
        this.idleStream(f);
        if (this.dropFromCaller.delete(f.stream)) return;
        const s = this.streams.get(f.stream);
        // A stream the proxy refused before the target saw it, and after every stream it did see: to the
        // target that stream is idle, and a frame on it would end the whole connection there.
        if (!s && f.stream > this.lastForwarded) return;
        this.passToTarget(f);
        if (!s) return;
        this.remember(this.dropFromTarget, f.stream);
        this.end(s, CALLER_CLOSED);
        this.countReset();
        return;
      }
      case FRAME.WINDOW_UPDATE:
        readWindowUpdate(f);
        if (f.stream !== 0) {
          this.idleStream(f);
          if (this.dropFromCaller.has(f.stream) || f.stream > this.lastForwarded) return;
        }
        this.passToTarget(f);
        return;
      case FRAME.PRIORITY:
        checkPriority(f);
        this.passToTarget(f);
        return;
      case FRAME.PING:
        checkPing(f);
        if (f.flags & FLAG.ACK) {
          if (this.targetPings === 0) return;
          this.targetPings--;
        } else if (!this.controls.take()) {
          this.abuse(
            "control_flood",
            `more than ${CONTROL_BURST} PING and SETTINGS frames (${CONTROL_RATE} a second)`,
          );
          return;
        } else this.callerPings++;
        this.passToTarget(f);
        return;
      case FRAME.SETTINGS:
        this.settings(f, "caller");
        return;
      case FRAME.GOAWAY:
        readGoAway(f);
        // The caller is leaving: its streams finish, then both connections close.
        this.goingAway = true;
        this.passToTarget(f);
        this.closeWhenDone();
        return;
      case FRAME.PUSH_PROMISE:
        throw new H2Error(ERROR.PROTOCOL_ERROR, "PUSH_PROMISE from a client");
      default:
        return; // unknown frame types are ignored (section 4.1)
    }
  }

  /**
   * A frame on a stream the caller never opened (section 5.1: idle) is a connection error: above its last
   * stream, or even (a server's, and the proxy opens none toward the caller).
   */
  private idleStream(f: Frame): void {
    if (f.stream > this.lastStream || f.stream % 2 === 0)
      throw new H2Error(ERROR.PROTOCOL_ERROR, `frame type ${f.type} on idle stream ${f.stream}`);
  }

  /**
   * DATA on a stream the caller may not send on: the credit it took is returned (the target never sees
   * it). Late DATA of a stream the proxy answered or reset is what the RFC lets a sender have in flight,
   * and is dropped; on any other closed or half-closed stream it is a stream error, STREAM_CLOSED.
   */
  private strayFromCaller(f: Frame): void {
    this.idleStream(f);
    if (f.length > 0) this.sendCaller(windowUpdate(0, f.length));
    if (this.dropFromCaller.has(f.stream)) {
      if (f.flags & FLAG.END_STREAM) this.dropFromCaller.delete(f.stream);
      return;
    }
    throw new H2Error(ERROR.STREAM_CLOSED, `DATA on closed stream ${f.stream}`, f.stream);
  }

  private callerHeaders(block: HeaderBlock): void {
    const headers = block.headers;
    const id = headers.stream;
    const endStream = (headers.flags & FLAG.END_STREAM) !== 0;
    const decoderBefore = this.fromCaller.changes;
    let looked: Lookup | undefined;
    let fields: readonly HeaderField[] | undefined;
    let lastFieldAt = -1;
    let tooLarge = false;
    try {
      looked = this.requests.get(block);
      if (!looked) {
        fields = this.fromCaller.decode(block.src, block.start, block.end);
        lastFieldAt = this.fromCaller.lastFieldAt;
      } else if ("fields" in looked) fields = looked.fields;
      else if ("tooLarge" in looked) tooLarge = true;
    } catch (e) {
      if (e instanceof HpackError) throw new H2Error(ERROR.COMPRESSION_ERROR, e.message);
      if (!(e instanceof HeaderListTooLarge)) throw e;
      tooLarge = true;
    }
    const kept = looked && "kept" in looked ? looked : undefined;
    const open = this.streams.get(id);
    if (open) {
      // Trailers: the second header block of a request, which ends it.
      if (dependsOnItself(headers))
        throw new H2Error(ERROR.PROTOCOL_ERROR, "a stream that depends on itself", id);
      if (open.callerEnded) throw new H2Error(ERROR.STREAM_CLOSED, "HEADERS after END_STREAM", id);
      if (!endStream) throw new H2Error(ERROR.PROTOCOL_ERROR, "a second header block without END_STREAM", id);
      if (open.bodyLeft > 0) throw new H2Error(ERROR.PROTOCOL_ERROR, SHORT_BODY, id);
      const all = kept ? [...kept.decoded, ...(kept.last ? [kept.last] : [])] : fields;
      const t =
        tooLarge || !all ? { malformed: "trailers over the size allowed" } : trailerH2Fields(all, true);
      if ("malformed" in t) throw new H2Error(ERROR.PROTOCOL_ERROR, t.malformed, id);
      headerFrames(id, this.toTarget.encode(t.fields), FLAG.END_STREAM, MAX_FRAME, this.targetFrameSink);
      this.callerEnded(open);
      return;
    }
    if (id % 2 === 0) throw new H2Error(ERROR.PROTOCOL_ERROR, `HEADERS on stream ${id}, not a client's`);
    if (id <= this.lastStream) {
      if (this.dropFromCaller.has(id)) return;
      if (this.skipped.some(([first, last]) => id >= first && id <= last))
        throw new H2Error(ERROR.PROTOCOL_ERROR, `stream ${id} opened after stream ${this.lastStream}`);
      throw new H2Error(ERROR.STREAM_CLOSED, `HEADERS on closed stream ${id}`);
    }
    const next = this.lastStream === 0 ? 1 : this.lastStream + 2;
    if (id > next) {
      this.skipped.push([next, id - 2]);
      if (this.skipped.length > MAX_SKIPPED) this.skipped.shift();
    }
    this.lastStream = id;
    if (dependsOnItself(headers)) {
      // The stream is opened and ended at once: what the caller sends on it after this is dropped.
      this.dropCaller(id, endStream);
      throw new H2Error(ERROR.PROTOCOL_ERROR, "a stream that depends on itself", id);
    }
    if (this.goingAway || this.now > this.validUntil) {
      this.refuseStream(id, endStream);
      if (!this.goingAway) this.retire("the caller's certificate or the target connection expired");
      return;
    }
    if (this.streams.size >= MAX_STREAMS) {
      this.refuseStream(id, endStream);
      return;
    }
    const s: Stream = {
      id,
      requestId: "",
      method: "",
      path: "",
      started: this.nowMono,
      status: 0,
      bytesIn: 0,
      bytesOut: 0,
      bodyLeft: -1,
      callerEnded: false,
      targetEnded: false,
      deadline: this.now + this.ctx.timeouts.readMs,
    };
    if (this.failure !== undefined) {
      this.answer(s, 502, this.failure, endStream);
      this.goAwayNow();
      return;
    }
    if (tooLarge || (!fields && !kept)) {
      this.answer(s, 431, `request header fields larger than ${MAX_HEADER_LIST} bytes`, endStream);
      return;
    }
    let request: KeptRequest;
    let requestId: HeaderField;
    if (kept) {
      request = kept.kept;
      requestId = kept.requestId ?? this.newRequestId();
      if (endStream && request.contentLength > 0) {
        this.malformedRequest(id, endStream, SHORT_BODY);
        return;
      }
    } else {
      const policy = callerH2Fields(fields as readonly HeaderField[], {
        peer: this.peer?.id.uri,
        newRequestId: this.newRequestId,
        remoteAddress: this.socket.remoteAddress,
      });
      // Refused before it is encoded: the target's table must not change for a block it never gets.
      if ("malformed" in policy || (endStream && policy.contentLength > 0)) {
        this.malformedRequest(id, endStream, "malformed" in policy ? policy.malformed : SHORT_BODY);
        return;
      }
      const encoderBefore = this.toTarget.changes;
      request = {
        out: this.toTarget.encode(policy.fields),
        method: "",
        path: "",
        contentLength: policy.contentLength,
      };
      if (this.ctx.debug)
        for (const f of policy.fields)
          if (f.name === ":method") request.method = f.value;
          else if (f.name === ":path") request.path = f.value;
      requestId = policy.requestId;
      if (lastFieldAt >= 0)
        this.requests.set(block, fields as HeaderField[], lastFieldAt, decoderBefore, encoderBefore, request);
    }
    s.requestId = requestId.value;
    s.method = request.method;
    s.path = request.path;
    s.bodyLeft = request.contentLength;
    this.streams.set(id, s);
    this.lastForwarded = id;
    this.lastActive = this.now;
    this.deadline = Math.min(this.deadline, s.deadline);
    const flags = endStream ? FLAG.END_STREAM : 0;
    headerFrames(
      id,
      request.out,
      flags,
      MAX_FRAME,
      this.targetFrameSink,
      this.toTarget.encodeLiteral(requestId),
    );
    if (endStream) this.callerEnded(s);
  }

  /** A request the policy refuses (RST_STREAM PROTOCOL_ERROR, counted as 400): the target never sees it. */
  private malformedRequest(id: number, endStream: boolean, reason: string): void {
    this.ctx.log.debug("request refused", { status: 400, reason, stream: id });
    this.ctx.events?.request(400, 0, 0, 0);
    this.dropCaller(id, endStream);
    this.sendCaller(rstStream(id, ERROR.PROTOCOL_ERROR));
  }

  /** The X-Request-Id of a request that came without one. */
  private readonly newRequestId = (): HeaderField => ({
    name: REQUEST_ID_HEADER,
    value: crypto.randomUUID(),
  });

  /** The caller ended its side of `s`, in a chunk it sent (stamp()). */
  private callerEnded(s: Stream): void {
    s.callerEnded = true;
    if (s.targetEnded) this.end(s, s.status, true);
    else {
      s.deadline = this.now + this.ctx.timeouts.writeMs;
      this.deadline = Math.min(this.deadline, s.deadline);
    }
  }

  /** A stream the proxy will not serve (too many, going away): REFUSED_STREAM, which a caller may retry. */
  private refuseStream(id: number, endStream: boolean): void {
    this.dropCaller(id, endStream);
    this.sendCaller(rstStream(id, ERROR.REFUSED_STREAM));
  }

  private dropCaller(id: number, endStream: boolean): void {
    if (!endStream) this.remember(this.dropFromCaller, id);
  }

  /** Adds a stream to one of the drop sets, forgetting the oldest past MAX_DROPPED. */
  private remember(set: Set<number>, id: number): void {
    set.add(id);
    if (set.size <= MAX_DROPPED) return;
    for (const old of set) {
      set.delete(old);
      if (set.size <= MAX_DROPPED) return;
    }
  }

  // ---- SETTINGS, both sides ----

  private settings(f: Frame, from: Side): void {
    const values = readSettings(f);
    const caller = from === "caller";
    const [me, other] = caller
      ? [this.callerSettings, this.targetSettings]
      : [this.targetSettings, this.callerSettings];
    const toMe = (b: Uint8Array) => (caller ? this.sendCaller(b) : this.sendTarget(b));
    const toOther = (b: Uint8Array) => (caller ? this.sendTarget(b) : this.sendCaller(b));
    if (f.flags & FLAG.ACK) {
      // The other side's SETTINGS that this ACK made due.
      for (let due = ackArrived(me, other); due > 0; due--) toOther(settingsFrame(undefined));
      return;
    }
    if (caller && !this.controls.take()) {
      this.abuse(
        "control_flood",
        `more than ${CONTROL_BURST} PING and SETTINGS frames (${CONTROL_RATE} a second)`,
      );
      return;
    }
    const table = values.get(SETTING.HEADER_TABLE_SIZE);
    if (table !== undefined)
      (caller ? this.toCaller : this.toTarget).setPeerMaxTableSize(encoderTableSize(table));
    const relay = relayed(values, from);
    if (relay) toOther(settingsFrame(relay));
    for (let due = settingsArrived(me, other, relay !== undefined); due > 0; due--)
      toMe(settingsFrame(undefined));
  }

  // ---- the target's side ----

  private dial(): void {
    if (this.dialled) return;
    this.dialled = true;
    const timer = setTimeout(
      () =>
        this.targetFailed(
          new SvcError("network", `HTTP/2 connection not made within ${this.ctx.timeouts.handshakeMs} ms`),
        ),
      this.ctx.timeouts.handshakeMs,
    );
    this.dialTimer = timer;
    Bun.connect<H2Relay>({
      ...this.ctx.target.connectOptions(),
      data: this,
      socket: TARGET_HANDLERS,
    }).catch((e: Error) => this.targetFailed(e));
  }

  private dialTimer: ReturnType<typeof setTimeout> | undefined;
  /** Why the target cannot be used, once it failed: each stream still to come is answered 502 with it. */
  private failure: string | undefined;
  private targetReady = false;

  /** The target's connection is open (plaintext) or past its handshake (TLS): checked, then used. */
  targetOpened(socket: Socket<H2Relay>): void {
    clearTimeout(this.dialTimer);
    if (this.closed) {
      socket.terminate();
      return;
    }
    this.target = socket;
    try {
      const checked = this.ctx.target.check(socket as Socket<unknown>);
      this.validUntil = Math.min(this.validUntil, checked.validUntil);
    } catch (e) {
      this.targetFailed(e as Error);
      return;
    }
    this.targetReady = true;
    const out = new Outbox(socket as Socket<unknown>);
    this.targetOut = out;
    out.add(PREFACE);
    out.add(settingsFrame(TARGET_SETTINGS));
    this.targetSettings.sent.push(undefined);
    for (const p of this.pending ?? []) out.add(p);
    this.pending = undefined;
    this.pendingBytes = 0;
    out.flush();
    this.flow();
  }

  targetData(data: Uint8Array): void {
    if (this.closed || this.closing) return;
    this.readChunk("target", data);
  }

  private fromTargetFrame(f: Frame): void {
    const block = this.targetBlocks.take(f);
    if (block) {
      this.targetHeaders(block);
      return;
    }
    if (f.type === FRAME.HEADERS || f.type === FRAME.CONTINUATION) return;
    if (f.stream > this.lastForwarded)
      throw new H2Error(ERROR.PROTOCOL_ERROR, `frame type ${f.type} on stream ${f.stream}, never opened`);
    switch (f.type) {
      case FRAME.DATA: {
        checkData(f);
        if (this.dropFromTarget.has(f.stream)) {
          if (f.length > 0) this.sendTarget(windowUpdate(0, f.length));
          if (f.flags & FLAG.END_STREAM) this.dropFromTarget.delete(f.stream);
          return;
        }
        const s = this.streams.get(f.stream);
        this.passToCaller(f);
        if (!s) return;
        s.bytesOut += f.length;
        if (f.flags & FLAG.END_STREAM) this.targetEnded(s);
        return;
      }
      case FRAME.RST_STREAM: {
        const code = readRstStream(f);
        if (this.dropFromTarget.delete(f.stream)) return;
        const s = this.streams.get(f.stream);
        if (!s) return; // a stream over for the caller already: a second reset would be an error there
        this.passToCaller(f);
        this.remember(this.dropFromCaller, f.stream);
        this.ctx.log.debug("stream reset by the target", { request_id: s.requestId, code });
        this.end(s, s.status || 502);
        // A caller can make a target reset its streams (a WINDOW_UPDATE past 2^31-1, say) and open new
        // ones while the target's work for them goes on: a reset before the answer ended counts as the
        // caller's own. One after it (NO_ERROR, the request no longer needed) does not, nor does
        // REFUSED_STREAM, which says the target did no work on it.
        if (!s.targetEnded && code !== ERROR.REFUSED_STREAM) this.countReset();
        return;
      }
      case FRAME.WINDOW_UPDATE:
        readWindowUpdate(f);
        if (f.stream !== 0 && this.dropFromTarget.has(f.stream)) return;
        this.passToCaller(f);
        return;
      case FRAME.PING:
        checkPing(f);
        if (f.flags & FLAG.ACK) {
          if (this.callerPings === 0) return;
          this.callerPings--;
        } else this.targetPings++;
        this.passToCaller(f);
        return;
      case FRAME.PRIORITY:
        return; // a server's priorities mean nothing to a client
      case FRAME.SETTINGS:
        this.settings(f, "target");
        return;
      case FRAME.GOAWAY: {
        const { lastStream } = readGoAway(f);
        // Streams above lastStream were not served: the caller hears so in the same GOAWAY, and may retry
        // them on a new connection. The rest finish; then both connections close.
        this.passToCaller(f);
        this.goingAway = true;
        for (const s of [...this.streams.values()])
          if (s.id > lastStream) {
            this.streams.delete(s.id);
            this.remember(this.dropFromTarget, s.id);
          }
        this.closeWhenDone();
        return;
      }
      case FRAME.PUSH_PROMISE:
        throw new H2Error(ERROR.PROTOCOL_ERROR, "PUSH_PROMISE, which the proxy disabled");
      default:
        return;
    }
  }

  private targetHeaders(block: HeaderBlock): void {
    const headers = block.headers;
    const id = headers.stream;
    const endStream = (headers.flags & FLAG.END_STREAM) !== 0;
    if (id > this.lastForwarded)
      throw new H2Error(ERROR.PROTOCOL_ERROR, `HEADERS on stream ${id}, never opened`);
    const s = this.dropFromTarget.has(id) ? undefined : this.streams.get(id);
    // A final response head or trailers like the last ones need neither decoding nor encoding.
    const cache = s && (s.status === 0 ? this.responseHeads : this.trailers);
    const hit = cache?.get(block);
    if (s && hit) {
      if (s.status === 0) s.status = hit.value;
      else if (!endStream) {
        this.badResponse(s, "malformed trailers");
        return;
      }
      headerFrames(id, hit.out, endStream ? FLAG.END_STREAM : 0, MAX_FRAME, this.callerFrameSink);
      if (endStream) this.targetEnded(s);
      return;
    }
    const decoderBefore = this.fromTarget.changes;
    let fields: HeaderField[] | undefined;
    try {
      fields = this.fromTarget.decode(block.src, block.start, block.end);
    } catch (e) {
      if (e instanceof HpackError) throw new H2Error(ERROR.COMPRESSION_ERROR, e.message);
      if (!(e instanceof HeaderListTooLarge)) throw e;
    }
    if (this.dropFromTarget.has(id)) {
      if (endStream) this.dropFromTarget.delete(id);
      return;
    }
    if (!s) return; // a stream the caller reset: the target may not have seen that yet
    if (!fields) {
      this.badResponse(s, `response header fields larger than ${MAX_HEADER_LIST} bytes`);
      return;
    }
    let out: HeaderField[];
    let status = 0;
    if (s.status === 0) {
      const r = targetH2Fields(fields);
      if ("malformed" in r) {
        this.badResponse(s, `malformed response: ${r.malformed}`);
        return;
      }
      out = r.fields;
      status = r.status;
      if (r.status >= 200) s.status = r.status;
      else if (endStream) {
        this.badResponse(s, "an interim response ended the stream");
        return;
      }
    } else {
      const t = trailerH2Fields(fields, false);
      if ("malformed" in t || !endStream) {
        this.badResponse(s, "malformed trailers");
        return;
      }
      out = t.fields;
    }
    const encoderBefore = this.toCaller.changes;
    const encoded = this.toCaller.encode(out);
    // Interim heads (1xx) are not kept: what follows them differs.
    if (cache && (status === 0 || status >= 200))
      cache.set(block, decoderBefore, encoderBefore, encoded, status);
    headerFrames(id, encoded, endStream ? FLAG.END_STREAM : 0, MAX_FRAME, this.callerFrameSink);
    if (endStream) this.targetEnded(s);
  }

  /** The target ended its side of `s`, in a chunk it sent (stamp()). */
  private targetEnded(s: Stream): void {
    s.targetEnded = true;
    if (s.callerEnded) this.end(s, s.status, true);
  }

  /** The target answered a stream wrongly: it is reset there, and answered 502 (or reset) to the caller. */
  private badResponse(s: Stream, reason: string): void {
    this.ctx.log.warn("upstream failure", {
      request_id: s.requestId,
      status: 502,
      failure: "target-failed",
      reason,
    });
    this.sendTarget(rstStream(s.id, ERROR.PROTOCOL_ERROR));
    this.remember(this.dropFromTarget, s.id);
    if (s.status === 0)
      this.answer(s, 502, `upstream ${this.ctx.targetUrl.origin} failed: ${reason}`, s.callerEnded);
    else {
      this.sendCaller(rstStream(s.id, ERROR.INTERNAL_ERROR));
      this.dropCaller(s.id, s.callerEnded);
      this.end(s, s.status);
    }
  }

  /** The target's connection could not be made or used: every stream waiting on it is answered 502. */
  targetFailed(e: Error): void {
    clearTimeout(this.dialTimer);
    if (this.closed || this.closing) return;
    const r = upstreamFailure(this.ctx.targetUrl, e);
    countRefusal(this.ctx.events, r);
    const reason = String(r.body).trim();
    this.ctx.log.warn("upstream failure", {
      status: 502,
      failure: r.failure,
      reason,
      streams: this.streams.size,
    });
    this.target?.terminate();
    this.target = undefined;
    this.targetEndedAll(reason.slice("svc-proxy: ".length));
  }

  /** The target's connection closed. */
  targetClosed(): void {
    clearTimeout(this.dialTimer);
    if (!this.targetReady) {
      this.targetFailed(closedEarly());
      return;
    }
    this.target = undefined;
    if (this.closed || this.closing) return;
    if (this.streams.size > 0)
      this.ctx.log.warn("upstream closed during the response", { streams: this.streams.size });
    this.targetEndedAll(`upstream ${this.ctx.targetUrl.origin} closed the connection`);
  }

  /** No more target: streams without an answer get 502, the others are reset; the caller is told to go. */
  private targetEndedAll(message: string): void {
    this.pending = undefined;
    this.pendingBytes = 0;
    const waiting = this.streams.size;
    for (const s of [...this.streams.values()]) {
      if (s.status === 0) this.answer(s, 502, message, s.callerEnded);
      else {
        this.sendCaller(rstStream(s.id, ERROR.INTERNAL_ERROR));
        this.end(s, s.status);
      }
    }
    // A caller that has not sent its first request yet is answered with it (502, and why), not with a
    // closed connection: the connection stays until then (timeouts.read at most).
    this.failure = message;
    if (waiting === 0 && this.lastStream === 0) this.deadline = Date.now() + this.ctx.timeouts.readMs;
    else this.goAwayNow();
  }

  /** No more streams: GOAWAY NO_ERROR names the last one, and the connection closes. */
  private goAwayNow(): void {
    this.sendCaller(goAway(this.lastStream, ERROR.NO_ERROR));
    this.goingAway = true;
    this.closeSoon();
  }

  /** The target broke the protocol: its connection ends, and so does the caller's. */
  private targetProtocolError(e: unknown): void {
    const err = e instanceof H2Error ? e : new H2Error(ERROR.INTERNAL_ERROR, (e as Error).message);
    if (!err.connection) {
      const s = this.streams.get(err.stream);
      if (s) this.badResponse(s, err.message);
      return;
    }
    this.sendTarget(goAway(0, err.code));
    this.targetOut?.flush();
    this.targetFailed(new Error(`HTTP/2 protocol error: ${err.message}`));
  }

  // ---- answers, ends ----

  /** The proxy answers a stream itself (the target never saw it, or is gone). */
  private answer(s: Stream, status: number, message: string, callerEnded: boolean): void {
    const r = proxyResponse(status, message);
    const body = Buffer.from(String(r.body), "utf8");
    const block = this.toCaller.encode([
      { name: ":status", value: String(status) },
      ...Object.entries(r.headers).map(([name, value]) => ({ name, value: String(value) })),
      { name: "content-length", value: String(body.length) },
    ]);
    headerFrames(s.id, block, 0, MAX_FRAME, this.callerFrameSink);
    this.sendCaller(frame(FRAME.DATA, FLAG.END_STREAM, s.id, body));
    // A request still arriving is told to stop (section 8.1); what it sends meanwhile is dropped.
    if (!callerEnded) {
      this.sendCaller(rstStream(s.id, ERROR.NO_ERROR));
      this.dropCaller(s.id, false);
    }
    s.status = status;
    this.end(s, status);
  }

  /** A stream is over: counted once, forgotten. `stamped`: while a chunk is read (stamp()). */
  private end(s: Stream, status: number, stamped = false): void {
    this.streams.delete(s.id);
    const seconds = ((stamped ? this.nowMono : performance.now()) - s.started) / 1000;
    this.ctx.events?.request(status, seconds, s.bytesIn, s.bytesOut);
    if (status === CALLER_CLOSED) {
      this.ctx.log.debug("request cancelled by the caller", { request_id: s.requestId });
      this.ctx.cancelled();
    } else if (this.ctx.debug)
      this.ctx.log.debug("request", {
        request_id: s.requestId,
        method: s.method,
        path: s.path,
        status,
        seconds,
        stream: s.id,
        ...(this.peer ? { peer: this.peer.id.uri } : {}),
      });
    if (this.streams.size === 0) {
      this.lastActive = stamped ? this.now : Date.now();
      if (this.goingAway) this.closeWhenDone();
      else this.deadline = Math.min(this.deadline, this.idleDeadline());
    }
  }

  /** Reads the clock for the chunk that just arrived. */
  private stamp(): void {
    this.now = Date.now();
    this.nowMono = performance.now();
  }

  private idleDeadline(): number {
    return Math.min(this.lastActive + this.ctx.timeouts.idleMs, this.validUntil);
  }

  /** The caller broke the protocol: a stream error resets that stream, a connection error ends both. */
  private callerError(e: unknown): void {
    const err = e instanceof H2Error ? e : new H2Error(ERROR.INTERNAL_ERROR, (e as Error).message);
    if (!err.connection) {
      this.sendCaller(rstStream(err.stream, err.code));
      const s = this.streams.get(err.stream);
      if (s) {
        this.sendTarget(rstStream(s.id, ERROR.CANCEL));
        this.remember(this.dropFromTarget, s.id);
        this.dropCaller(s.id, s.callerEnded);
        this.end(s, 400);
        // A stream the caller's error made the proxy reset at the target is a reset like the caller's own
        // (sent RST_STREAM): both take work from the target, and count against the same limit.
        this.countReset();
      }
      return;
    }
    const reason: H2Abuse = "protocol_error";
    this.ctx.events?.http2Ended(reason);
    this.ctx.log.warn("caller HTTP/2 connection ended", {
      reason,
      detail: err.message,
      remote: this.socket.remoteAddress,
    });
    this.endBoth(err.code);
  }

  /**
   * One more stream reset before its end, for the caller: by the caller (rapid reset), by the proxy for
   * its errors on open streams, or by the target (what the caller sent may have made it).
   */
  private countReset(): void {
    if (!this.resets.take())
      this.abuse(
        "rapid_reset",
        `more than ${RESET_BURST} streams reset before their end, by the caller, for its errors or by the target (${RESET_RATE} a second)`,
      );
  }

  private abuse(reason: H2Abuse, detail: string): void {
    if (this.closing) return;
    this.ctx.events?.http2Ended(reason);
    this.ctx.log.warn("caller HTTP/2 connection ended", {
      reason,
      detail,
      remote: this.socket.remoteAddress,
    });
    this.endBoth(ERROR.ENHANCE_YOUR_CALM);
  }

  /**
   * Ends both connections now: GOAWAY to the caller with `code`, the target's streams cancelled. The
   * caller's connection is closed once the GOAWAY is written, or, for abuse (ENHANCE_YOUR_CALM), reset
   * after the grace: a flood may not read what it is sent.
   */
  private endBoth(code: number): void {
    this.sendCaller(goAway(this.lastStream, code));
    for (const s of [...this.streams.values()]) {
      this.sendTarget(rstStream(s.id, ERROR.CANCEL));
      this.end(s, CALLER_CLOSED);
    }
    this.sendTarget(goAway(0, ERROR.NO_ERROR));
    this.targetOut?.flush();
    // Closing first: the target's close may be reported at once, and must not answer the caller again.
    this.closeSoon(code === ERROR.ENHANCE_YOUR_CALM);
    this.target?.end();
  }

  /**
   * Stops taking new streams (a drain, an SVID rotation, an expired certificate): GOAWAY NO_ERROR names
   * the last stream served; the connection closes once the open ones have ended.
   */
  retire(why: string): void {
    if (this.goingAway || this.closing) return;
    this.ctx.log.debug("caller HTTP/2 connection retired", { why, remote: this.socket.remoteAddress });
    this.goingAway = true;
    this.sendCaller(goAway(this.lastStream, ERROR.NO_ERROR));
    this.callerOut.flush();
    this.closeWhenDone();
  }

  private closeWhenDone(): void {
    if (this.streams.size === 0) {
      this.closeSoon();
      this.target?.end();
    }
  }

  /** Called by the listener's sweep once the deadline has passed. */
  expire(): void {
    if (this.closed) return;
    const now = Date.now();
    if (this.closing) {
      this.terminate();
      return;
    }
    if (this.preface) {
      this.ctx.log.debug("caller HTTP/2 connection closed", {
        reason: `no HTTP/2 preface within ${this.ctx.timeouts.readMs} ms`,
      });
      this.terminate();
      return;
    }
    if (this.failure !== undefined) {
      this.goAwayNow();
      this.flushBoth();
      return;
    }
    if (this.callerBlocks.open && now >= this.blockDeadline) {
      // The table it was to be decoded with cannot be used without the rest: the connection ends.
      this.ctx.log.debug("caller HTTP/2 connection closed", {
        reason: `a header block not ended within ${this.ctx.timeouts.readMs} ms`,
        remote: this.socket.remoteAddress,
      });
      this.endBoth(ERROR.PROTOCOL_ERROR);
      this.flushBoth();
      return;
    }
    let next = this.callerBlocks.open ? this.blockDeadline : Number.POSITIVE_INFINITY;
    for (const s of [...this.streams.values()]) {
      if (now < s.deadline) {
        next = Math.min(next, s.deadline);
        continue;
      }
      const t = s.callerEnded
        ? targetTimedOut(this.ctx.timeouts, this.ctx.targetUrl)
        : requestTimedOut(this.ctx.timeouts);
      this.sendTarget(rstStream(s.id, ERROR.CANCEL));
      this.remember(this.dropFromTarget, s.id);
      if (s.status === 0) {
        this.answer(s, t.status, t.message, s.callerEnded);
        continue;
      }
      // The response has begun, so only a reset can end it (RFC 9113 section 8.1): NO_ERROR when the
      // target had answered in full and the request was never finished, CANCEL when the answer was cut.
      this.ctx.log.debug("stream reset after its response began", {
        request_id: s.requestId,
        reason: t.message,
      });
      this.sendCaller(rstStream(s.id, s.targetEnded ? ERROR.NO_ERROR : ERROR.CANCEL));
      this.dropCaller(s.id, s.callerEnded);
      this.end(s, s.status);
    }
    if (this.streams.size === 0) {
      if (now >= this.idleDeadline()) {
        this.retire("idle");
        return;
      }
      next = Math.min(next, this.idleDeadline());
    }
    this.deadline = next;
    this.flushBoth();
  }

  // ---- writing, flow ----

  private passToTarget(f: Frame): void {
    if (this.targetOut) this.targetOut.addRange(f.src, f.start, f.end);
    else this.queueForTarget(f.bytes);
  }

  private passToCaller(f: Frame): void {
    this.callerOut.addRange(f.src, f.start, f.end);
  }

  private sendTarget(p: Uint8Array): void {
    if (this.targetOut) this.targetOut.add(p);
    else this.queueForTarget(p);
  }

  private queueForTarget(p: Uint8Array): void {
    if (!this.pending) return; // the target is gone
    this.pending.push(p);
    this.pendingBytes += p.length;
  }

  private sendCaller(p: Uint8Array): void {
    this.callerOut.add(p);
  }

  /** Header blocks for each side: frame headers written into what its outbox sends next. */
  private readonly callerFrameSink: FrameSink = {
    add: (p) => this.callerOut.add(p),
    header: (length, type, flags, stream) => headerInto(this.callerOut, length, type, flags, stream),
  };
  private readonly targetFrameSink: FrameSink = {
    add: (p) => this.sendTarget(p),
    header: (length, type, flags, stream) => {
      if (this.targetOut) headerInto(this.targetOut, length, type, flags, stream);
      else this.queueForTarget(frameHeader(length, type, flags, stream));
    },
  };

  private flushBoth(): void {
    this.targetOut?.flush();
    this.callerOut.flush();
    if (this.closing && !this.resetting && this.callerOut.queued === 0) this.socket.end();
    this.flow();
  }

  /** Pauses a side that sends faster than the other side takes. */
  private flow(): void {
    const behind = (this.targetOut?.queued ?? 0) + this.pendingBytes;
    if (behind > HIGH_WATER !== this.callerPaused) {
      this.callerPaused = !this.callerPaused;
      if (this.callerPaused) this.socket.pause();
      else this.socket.resume();
    }
    const t = this.target;
    if (t && this.callerOut.queued > HIGH_WATER !== this.targetPaused) {
      this.targetPaused = !this.targetPaused;
      if (this.targetPaused) t.pause();
      else t.resume();
    }
  }

  drained(): void {
    if (!this.callerOut.drain()) return;
    if (this.closing && !this.resetting) this.socket.end();
    else this.flow();
  }

  targetDrained(): void {
    if (this.targetOut?.drain()) this.flow();
  }

  /**
   * Closes once what was answered has been written (at most CLOSE_GRACE_MS from now). With `reset`, the
   * connection is reset when the grace ends, whatever the caller has not read: a caller that ended up
   * here by abuse may not read at all, and would otherwise hold a half-closed connection.
   */
  closeSoon(reset = false): void {
    if (this.closing) return;
    this.closing = true;
    this.resetting = reset;
    this.deadline = Date.now() + CLOSE_GRACE_MS;
    this.callerOut.flush();
    if (!reset && this.callerOut.queued === 0) this.socket.end();
  }

  private resetting = false;

  terminate(): void {
    this.closing = true;
    this.target?.terminate();
    this.socket.terminate();
  }

  /** The caller's connection closed: every open stream is the caller's cancellation. */
  gone(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.dialTimer);
    for (const s of [...this.streams.values()]) this.end(s, CALLER_CLOSED);
    this.target?.terminate();
    this.target = undefined;
  }
}

const NO_FRAMES: readonly Frame[] = [];

/** Writes a frame header into what `out` sends next. */
function headerInto(out: Outbox, length: number, type: number, flags: number, stream: number): void {
  const at = out.reserve(9);
  writeFrameHeader(out.ownBytes, at, length, type, flags, stream);
}

const TARGET_HANDLERS = {
  open(socket: Socket<H2Relay>) {
    if (!socket.data.tlsTarget) socket.data.targetOpened(socket);
  },
  handshake(socket: Socket<H2Relay>) {
    socket.data.targetOpened(socket);
  },
  data(socket: Socket<H2Relay>, chunk: Uint8Array) {
    socket.data.targetData(chunk);
  },
  drain(socket: Socket<H2Relay>) {
    socket.data.targetDrained();
  },
  error(socket: Socket<H2Relay>, error: Error & { code?: string }) {
    if (!error.code) socket.terminate();
  },
  close(socket: Socket<H2Relay>) {
    socket.data.targetClosed();
  },
  connectError(socket: Socket<H2Relay>, error: Error) {
    socket.data.targetFailed(error);
  },
};
