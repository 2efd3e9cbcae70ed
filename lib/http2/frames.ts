/**
 * HTTP/2 frames (RFC 9113 section 4 and 6), read only as far as a relay must: the 9-octet header of every
 * frame, so that frames can be passed on as the bytes they arrived in, and the payloads of the frames a
 * relay acts on (SETTINGS, HEADERS and CONTINUATION, WINDOW_UPDATE, RST_STREAM, PING, GOAWAY). Header
 * blocks are collected from HEADERS and CONTINUATION frames to END_HEADERS, with no other frame between
 * and a bound on their size. Every violation is an H2Error with the error code the RFC names and whether
 * it ends the connection or only the stream.
 */

export const FRAME = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

export const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

export const SETTING = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

export const ERROR = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  SETTINGS_TIMEOUT: 0x4,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  CONNECT_ERROR: 0xa,
  ENHANCE_YOUR_CALM: 0xb,
  INADEQUATE_SECURITY: 0xc,
  HTTP_1_1_REQUIRED: 0xd,
} as const;

/** What a client sends first (section 3.4). */
export const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

/** The preface's first bytes, "PRI * HTTP/2.0": no HTTP/1.1 request line starts so. */
const PREFACE_HEAD = PREFACE.subarray(0, 14);

/**
 * Whether the first bytes a server read open HTTP/2's preface (prior knowledge, h2c) rather than an
 * HTTP/1.1 request: true or false, or undefined while they are too few to tell.
 */
export function opensPreface(seen: Uint8Array): boolean | undefined {
  const n = Math.min(seen.length, PREFACE_HEAD.length);
  if (Buffer.compare(seen.subarray(0, n), PREFACE_HEAD.subarray(0, n)) !== 0) return false;
  return n < PREFACE_HEAD.length ? undefined : true;
}
export const DEFAULT_MAX_FRAME_SIZE = 16_384;
const MAX_MAX_FRAME_SIZE = 2 ** 24 - 1;
const MAX_WINDOW = 2 ** 31 - 1;

/** A violation: `stream` 0 (or `connection`) ends the connection with GOAWAY, else RST_STREAM. */
export class H2Error extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly stream = 0,
  ) {
    super(message);
  }
  get connection(): boolean {
    return this.stream === 0;
  }
}

/**
 * A frame as received: `src` from `start` on, its 9-octet header and `length` octets of payload. Frames
 * read from one chunk share it, so that a relay can pass on a run of them as one range of it; views of
 * the bytes are made only when asked for.
 */
export class Frame {
  constructor(
    public type: number,
    public flags: number,
    public stream: number,
    public src: Uint8Array,
    public start: number,
    public length: number,
  ) {}

  /** A frame of its own, with the same fields (a frame from FrameReader.read is reused). */
  copy(): Frame {
    return new Frame(this.type, this.flags, this.stream, this.src, this.start, this.length);
  }

  /** Where the frame ends in `src`. */
  get end(): number {
    return this.start + 9 + this.length;
  }

  /** The frame's bytes as received, header included: what a relay passes on. */
  get bytes(): Uint8Array {
    return this.src.subarray(this.start, this.end);
  }

  get payload(): Uint8Array {
    return this.src.subarray(this.start + 9, this.end);
  }
}

const EMPTY = new Uint8Array(0);
/** How many frame objects a reader keeps for reuse (what a busy connection's chunk holds). */
const POOLED = 64;

/** A frame of nothing, for objects kept while they hold none. */
const NO_FRAME = new Frame(0, 0, 0, EMPTY, 0, 0);

/**
 * Splits received bytes into frames. `maxFrameSize` is the SETTINGS_MAX_FRAME_SIZE this side announced: a
 * larger frame is a connection error (FRAME_SIZE_ERROR). With `preface`, the client preface must come
 * first (a server's reader).
 */
export class FrameReader {
  private buf: Uint8Array = EMPTY;
  private prefaceLeft: number;

  constructor(
    private readonly maxFrameSize = DEFAULT_MAX_FRAME_SIZE,
    preface = false,
  ) {
    this.prefaceLeft = preface ? PREFACE.length : 0;
  }

  /**
   * The frames `chunk` completes, in order, each a frame of its own; bytes of an unfinished frame are
   * kept for the next chunk.
   */
  push(chunk: Uint8Array): Frame[] {
    return this.parse(chunk, false) as Frame[];
  }

  /** The frames read last: a list and frame objects reused by every read, no allocation per frame. */
  private frames: Frame[] = [];
  /** Frame objects kept for reads: at most POOLED (past that, a chunk's frames are new objects). */
  private readonly pool: Frame[] = [];
  /** How many of the pool reads used since the last release. */
  private used = 0;

  /**
   * As push, but the list and its frames are the reader's own, valid until the next read or release: a
   * relay that handles each frame at once reads with it, copies a frame it keeps (Frame.copy), and
   * releases them once done, so that they keep no chunk alive. A frame that arrived whole in one chunk is
   * a range of it (the runtime hands each read a buffer of its own); only a frame split across chunks is
   * copied, into a buffer of its own size.
   */
  read(chunk: Uint8Array): readonly Frame[] {
    return this.parse(chunk, true);
  }

  /** Lets go of the chunks the frames of the last read point into. */
  release(): void {
    for (let i = 0; i < this.used; i++) (this.pool[i] as Frame).src = EMPTY;
    this.used = 0;
    this.clearList();
  }

  /** Empties the list of the last read; a list that a chunk of many frames made long is not kept. */
  private clearList(): void {
    if (this.frames.length > POOLED) this.frames = [];
    else this.frames.length = 0;
  }

  private parse(chunk: Uint8Array, pooled: boolean): readonly Frame[] {
    let frames: Frame[];
    if (pooled) {
      this.clearList();
      frames = this.frames;
    } else frames = [];
    let p = 0;
    if (this.prefaceLeft) {
      const n = Math.min(this.prefaceLeft, chunk.length);
      const at = PREFACE.length - this.prefaceLeft;
      for (let i = 0; i < n; i++)
        if (chunk[i] !== PREFACE[at + i])
          throw new H2Error(ERROR.PROTOCOL_ERROR, "not the HTTP/2 client preface");
      this.prefaceLeft -= n;
      p = n;
    }
    if (this.buf.length) {
      // The frame begun in earlier chunks: its header first, then as much of it as this chunk holds.
      const have = this.buf.length;
      if (have < 9) {
        const head = joined([this.buf, chunk.subarray(p, p + 9 - have)]);
        p += head.length - have;
        this.buf = head;
        if (head.length < 9) return frames;
      }
      const total = 9 + this.lengthAt(this.buf, 0);
      const take = Math.min(total - this.buf.length, chunk.length - p);
      const whole = take > 0 ? joined([this.buf, chunk.subarray(p, p + take)]) : this.buf;
      p += take;
      if (whole.length < total) {
        this.buf = whole;
        return frames;
      }
      this.add(frames, pooled, whole, 0, total - 9);
      this.buf = EMPTY;
    }
    while (chunk.length - p >= 9) {
      const length = this.lengthAt(chunk, p);
      if (chunk.length - p < 9 + length) break;
      this.add(frames, pooled, chunk, p, length);
      p += 9 + length;
    }
    this.buf = p < chunk.length ? chunk.subarray(p) : EMPTY;
    if (pooled) this.used = Math.max(this.used, Math.min(frames.length, this.pool.length));
    return frames;
  }

  /** Adds the frame whose header is at `src[start]`, `length` octets of payload after it, to `frames`. */
  private add(frames: Frame[], pooled: boolean, src: Uint8Array, start: number, length: number): void {
    const type = src[start + 3] as number;
    const flags = src[start + 4] as number;
    const stream = readUint31(src, start + 5);
    const n = frames.length;
    const f = pooled ? this.pool[n] : undefined;
    if (f) {
      f.type = type;
      f.flags = flags;
      f.stream = stream;
      f.src = src;
      f.start = start;
      f.length = length;
      frames.push(f);
      return;
    }
    const fresh = new Frame(type, flags, stream, src, start, length);
    if (pooled && n < POOLED) this.pool.push(fresh);
    frames.push(fresh);
  }

  /** The length of the frame whose header starts at `at`, within the size announced. */
  private lengthAt(b: Uint8Array, at: number): number {
    const length = ((b[at] as number) << 16) | ((b[at + 1] as number) << 8) | (b[at + 2] as number);
    if (length > this.maxFrameSize)
      throw new H2Error(
        ERROR.FRAME_SIZE_ERROR,
        `a frame of ${length} octets, over the ${this.maxFrameSize} announced`,
      );
    return length;
  }
}

const readUint31 = (b: Uint8Array, at: number) =>
  ((b[at] as number) & 0x7f) * 2 ** 24 +
  ((b[at + 1] as number) << 16) +
  (((b[at + 2] as number) << 8) | (b[at + 3] as number));

/** A frame's 9-octet header. */
export function frameHeader(length: number, type: number, flags: number, stream: number): Uint8Array {
  const h = new Uint8Array(9);
  writeFrameHeader(h, 0, length, type, flags, stream);
  return h;
}

/** Writes a frame's 9-octet header into `b` at `at`. */
export function writeFrameHeader(
  b: Uint8Array,
  at: number,
  length: number,
  type: number,
  flags: number,
  stream: number,
): void {
  b[at] = (length >>> 16) & 0xff;
  b[at + 1] = (length >>> 8) & 0xff;
  b[at + 2] = length & 0xff;
  b[at + 3] = type;
  b[at + 4] = flags;
  b[at + 5] = (stream >>> 24) & 0x7f;
  b[at + 6] = (stream >>> 16) & 0xff;
  b[at + 7] = (stream >>> 8) & 0xff;
  b[at + 8] = stream & 0xff;
}

/** Where frames made piece by piece go: octets as they are, and frame headers written in place. */
export interface FrameSink {
  add(piece: Uint8Array): void;
  header(length: number, type: number, flags: number, stream: number): void;
}

/** A sink that collects the pieces, each header a buffer of its own (for tests and tools). */
export function collect(pieces: Uint8Array[]): FrameSink {
  return {
    add: (p) => pieces.push(p),
    header: (length, type, flags, stream) => pieces.push(frameHeader(length, type, flags, stream)),
  };
}

/** A SETTINGS frame's parameters, checked as section 6.5.2 requires; unknown ones are ignored. */
export function readSettings(f: Frame): Map<number, number> {
  if (f.stream !== 0) throw new H2Error(ERROR.PROTOCOL_ERROR, "SETTINGS on a stream");
  if (f.flags & FLAG.ACK) {
    if (f.payload.length !== 0) throw new H2Error(ERROR.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload");
    return new Map();
  }
  if (f.payload.length % 6 !== 0)
    throw new H2Error(ERROR.FRAME_SIZE_ERROR, "SETTINGS length not a multiple of 6");
  const out = new Map<number, number>();
  for (let p = 0; p < f.payload.length; p += 6) {
    const id = ((f.payload[p] as number) << 8) | (f.payload[p + 1] as number);
    const value = readUint32(f.payload, p + 2);
    if (id === SETTING.ENABLE_PUSH && value > 1)
      throw new H2Error(ERROR.PROTOCOL_ERROR, `SETTINGS_ENABLE_PUSH ${value}`);
    if (id === SETTING.INITIAL_WINDOW_SIZE && value > MAX_WINDOW)
      throw new H2Error(ERROR.FLOW_CONTROL_ERROR, `SETTINGS_INITIAL_WINDOW_SIZE ${value}`);
    if (id === SETTING.MAX_FRAME_SIZE && (value < DEFAULT_MAX_FRAME_SIZE || value > MAX_MAX_FRAME_SIZE))
      throw new H2Error(ERROR.PROTOCOL_ERROR, `SETTINGS_MAX_FRAME_SIZE ${value}`);
    out.set(id, value);
  }
  return out;
}

const readUint32 = (b: Uint8Array, at: number) =>
  (b[at] as number) * 2 ** 24 +
  (((b[at + 1] as number) << 16) | ((b[at + 2] as number) << 8) | (b[at + 3] as number));

/** A WINDOW_UPDATE's increment (section 6.9): a zero increment is an error of its stream (or connection). */
export function readWindowUpdate(f: Frame): number {
  if (f.payload.length !== 4) throw new H2Error(ERROR.FRAME_SIZE_ERROR, "WINDOW_UPDATE length not 4");
  const increment = readUint31(f.payload, 0);
  if (increment === 0) throw new H2Error(ERROR.PROTOCOL_ERROR, "WINDOW_UPDATE of 0", f.stream);
  return increment;
}

/** Where a HEADERS frame's header block fragment lies in `f.src`, past its padding and priority. */
function fragmentOf(f: Frame): { start: number; end: number } {
  if (f.stream === 0) throw new H2Error(ERROR.PROTOCOL_ERROR, "HEADERS on stream 0");
  let start = 0;
  let end = f.length;
  const at = f.start + 9;
  if (f.flags & FLAG.PADDED) {
    if (end < 1) throw new H2Error(ERROR.FRAME_SIZE_ERROR, "HEADERS too short for its padding");
    const pad = f.src[at] as number;
    start = 1;
    if (pad >= end) throw new H2Error(ERROR.PROTOCOL_ERROR, "HEADERS padding as long as its payload");
    end -= pad;
  }
  if (f.flags & FLAG.PRIORITY) {
    if (end - start < 5) throw new H2Error(ERROR.FRAME_SIZE_ERROR, "HEADERS too short for its priority");
    start += 5;
  }
  return { start: at + start, end: at + end };
}

/** A HEADERS frame whose priority names its own stream as the one it depends on (section 5.3.1). */
export function dependsOnItself(f: Frame): boolean {
  if (!(f.flags & FLAG.PRIORITY)) return false;
  const at = f.flags & FLAG.PADDED ? 1 : 0;
  return f.payload.length >= at + 4 && readUint31(f.payload, at) === f.stream;
}

/** Octets `src[start..end)`, read where they are. */
export interface Octets {
  readonly src: Uint8Array;
  readonly start: number;
  readonly end: number;
}

/** A complete header block, `src[start..end)`, and the HEADERS frame that opened it. */
export class HeaderBlock implements Octets {
  constructor(
    public headers: Frame,
    public src: Uint8Array,
    public start: number,
    public end: number,
  ) {}

  /** The block as one view (made when asked for). */
  get block(): Uint8Array {
    return this.src.subarray(this.start, this.end);
  }
}

/**
 * The most frames a header block may take: a block of the largest size allowed fits in fewer when its
 * frames are full (128 KiB in 8 of 16,384 octets). nghttp2 allows 8 CONTINUATION frames.
 */
export const MAX_BLOCK_FRAMES = 32;

/**
 * Collects header blocks (section 4.3): a HEADERS frame without END_HEADERS must be followed by
 * CONTINUATION frames of the same stream, and by nothing else, up to one with END_HEADERS. A block longer
 * than `maxBlock` octets, or in more than MAX_BLOCK_FRAMES frames (empty or tiny CONTINUATION frames, each
 * of which costs the reader more than its octets), is refused (a CONTINUATION flood) before it is all read.
 */
export class HeaderBlocks {
  private stream = 0;
  private parts: Uint8Array[] = [];
  private size = 0;
  private first: Frame | undefined;

  constructor(private readonly maxBlock: number) {}

  /** True while a block is open: only a CONTINUATION of its stream may come next. */
  get open(): boolean {
    return this.stream !== 0;
  }

  /** What a block in one frame is handed out in: one object, valid until the next take or release. */
  private readonly single = new HeaderBlock(NO_FRAME, EMPTY, 0, 0);

  /** Lets go of the chunk the last block in one frame points into. */
  release(): void {
    this.single.headers = NO_FRAME;
    this.single.src = EMPTY;
  }

  /**
   * Takes a frame; returns the finished block (with the HEADERS frame that opened it) when this frame
   * ends one, undefined while one is open or when the frame is not part of a block. A block in one frame
   * is valid until the next take or release.
   */
  take(f: Frame): HeaderBlock | undefined {
    if (this.open && (f.type !== FRAME.CONTINUATION || f.stream !== this.stream))
      throw new H2Error(ERROR.PROTOCOL_ERROR, "a header block interrupted before END_HEADERS");
    if (f.type === FRAME.HEADERS) {
      const { start, end } = fragmentOf(f);
      this.size = 0;
      this.count(end - start);
      // The common case, a block in one frame, is read where it arrived (and handed out in an object
      // kept for it).
      if (f.flags & FLAG.END_HEADERS) {
        const b = this.single;
        b.headers = f;
        b.src = f.src;
        b.start = start;
        b.end = end;
        return b;
      }
      this.first = f.copy(); // a frame a reader reuses
      this.stream = f.stream;
      this.parts = [f.src.subarray(start, end)];
      return undefined;
    }
    if (f.type !== FRAME.CONTINUATION) return undefined;
    if (!this.open) throw new H2Error(ERROR.PROTOCOL_ERROR, "CONTINUATION without a header block");
    this.add(f.payload);
    if (!(f.flags & FLAG.END_HEADERS)) return undefined;
    const block = joined(this.parts, this.size);
    const headers = this.first as Frame;
    this.stream = 0;
    this.parts = [];
    this.first = undefined;
    return new HeaderBlock(headers, block, 0, block.length);
  }

  private add(part: Uint8Array): void {
    this.count(part.length);
    if (this.parts.length >= MAX_BLOCK_FRAMES)
      throw new H2Error(ERROR.ENHANCE_YOUR_CALM, `a header block in more than ${MAX_BLOCK_FRAMES} frames`);
    this.parts.push(part);
  }

  /** Counts `n` more octets of the open block, refusing a block over the limit. */
  private count(n: number): void {
    this.size += n;
    if (this.size > this.maxBlock)
      throw new H2Error(ERROR.ENHANCE_YOUR_CALM, `a header block over ${this.maxBlock} octets`);
  }
}

function joined(parts: Uint8Array[], size = parts.reduce((n, p) => n + p.length, 0)): Uint8Array {
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * A header block as frames for a peer, given piece by piece to `out` (no array per block): one HEADERS
 * frame (`flags` with END_STREAM as the request or response has it), then CONTINUATION frames, each at
 * most `maxFrameSize` octets of the block. A `tail` is more of the same block, encoded apart.
 */
export function headerFrames(
  stream: number,
  block: Uint8Array,
  flags: number,
  maxFrameSize: number,
  out: FrameSink,
  tail?: Uint8Array,
): void {
  // The common case, a block that fits one frame, makes no view of it.
  const size = block.length + (tail?.length ?? 0);
  if (size <= maxFrameSize) {
    out.header(size, FRAME.HEADERS, (flags & FLAG.END_STREAM) | FLAG.END_HEADERS, stream);
    out.add(block);
    if (tail) out.add(tail);
    return;
  }
  if (tail) {
    headerFrames(stream, joined([block, tail], size), flags, maxFrameSize, out);
    return;
  }
  let at = 0;
  do {
    const part = block.subarray(at, at + maxFrameSize);
    const type = at === 0 ? FRAME.HEADERS : FRAME.CONTINUATION;
    at += part.length;
    const last = at >= block.length;
    const f = (type === FRAME.HEADERS ? flags & FLAG.END_STREAM : 0) | (last ? FLAG.END_HEADERS : 0);
    out.header(part.length, type, f, stream);
    out.add(part);
  } while (at < block.length);
}

/** A frame of the proxy's own. */
export function frame(type: number, flags: number, stream: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(9 + payload.length);
  writeFrameHeader(out, 0, payload.length, type, flags, stream);
  out.set(payload, 9);
  return out;
}

/** Writes `value` big-endian at `at` (typed arrays are written byte by byte: a view of their buffer costs
 * more than the frame). */
function putUint32(b: Uint8Array, at: number, value: number): void {
  b[at] = (value >>> 24) & 0xff;
  b[at + 1] = (value >>> 16) & 0xff;
  b[at + 2] = (value >>> 8) & 0xff;
  b[at + 3] = value & 0xff;
}

const uint32 = (value: number): Uint8Array => {
  const b = new Uint8Array(4);
  putUint32(b, 0, value);
  return b;
};

export const rstStream = (stream: number, code: number): Uint8Array =>
  frame(FRAME.RST_STREAM, 0, stream, uint32(code));

export const windowUpdate = (stream: number, increment: number): Uint8Array =>
  frame(FRAME.WINDOW_UPDATE, 0, stream, uint32(increment));

export function goAway(lastStream: number, code: number): Uint8Array {
  const payload = new Uint8Array(8);
  putUint32(payload, 0, lastStream & 0x7fffffff);
  putUint32(payload, 4, code);
  return frame(FRAME.GOAWAY, 0, 0, payload);
}

/** A SETTINGS frame with `values` (identifier to value), or its ACK when `values` is undefined. */
export function settingsFrame(values: ReadonlyMap<number, number> | undefined): Uint8Array {
  if (!values) return frame(FRAME.SETTINGS, FLAG.ACK, 0, new Uint8Array(0));
  const payload = new Uint8Array(values.size * 6);
  let at = 0;
  for (const [id, value] of values) {
    payload[at] = (id >>> 8) & 0xff;
    payload[at + 1] = id & 0xff;
    putUint32(payload, at + 2, value);
    at += 6;
  }
  return frame(FRAME.SETTINGS, 0, 0, payload);
}

/** A GOAWAY's last stream and error code (section 6.8). */
export function readGoAway(f: Frame): { lastStream: number; code: number } {
  if (f.stream !== 0) throw new H2Error(ERROR.PROTOCOL_ERROR, "GOAWAY on a stream");
  if (f.payload.length < 8) throw new H2Error(ERROR.FRAME_SIZE_ERROR, "GOAWAY shorter than 8 octets");
  return { lastStream: readUint31(f.payload, 0), code: readUint32(f.payload, 4) };
}

/** A RST_STREAM's error code (section 6.4). */
export function readRstStream(f: Frame): number {
  if (f.stream === 0) throw new H2Error(ERROR.PROTOCOL_ERROR, "RST_STREAM on stream 0");
  if (f.payload.length !== 4) throw new H2Error(ERROR.FRAME_SIZE_ERROR, "RST_STREAM length not 4");
  return readUint32(f.payload, 0);
}

/** Checks a PING (section 6.7). */
export function checkPing(f: Frame): void {
  if (f.stream !== 0) throw new H2Error(ERROR.PROTOCOL_ERROR, "PING on a stream");
  if (f.payload.length !== 8) throw new H2Error(ERROR.FRAME_SIZE_ERROR, "PING length not 8");
}

/** Checks a PRIORITY frame (section 6.3): a stream that depends on itself is its own error. */
export function checkPriority(f: Frame): void {
  if (f.stream === 0) throw new H2Error(ERROR.PROTOCOL_ERROR, "PRIORITY on stream 0");
  if (f.payload.length !== 5) throw new H2Error(ERROR.FRAME_SIZE_ERROR, "PRIORITY length not 5", f.stream);
  if (readUint31(f.payload, 0) === f.stream)
    throw new H2Error(ERROR.PROTOCOL_ERROR, "a stream that depends on itself", f.stream);
}

/**
 * Checks a DATA frame (section 6.1): on a stream, its padding shorter than its payload. Returns the length
 * of its data, without the padding.
 */
export function checkData(f: Frame): number {
  if (f.stream === 0) throw new H2Error(ERROR.PROTOCOL_ERROR, "DATA on stream 0");
  if (!(f.flags & FLAG.PADDED)) return f.length;
  const pad = f.payload[0];
  if (pad === undefined || pad >= f.payload.length)
    throw new H2Error(ERROR.PROTOCOL_ERROR, "DATA padding as long as its payload");
  return f.length - 1 - pad;
}
