import net from "node:net";
import { FLAG, FRAME, type Frame, FrameReader } from "../../lib/http2/frames.ts";
import { type HeaderField, HpackDecoder, HpackEncoder } from "../../lib/http2/hpack.ts";
import { waitUntil } from "./wait.ts";

/** A caller writing raw HTTP/2 frames (h2c, prior knowledge) and reading the proxy's, with header blocks decoded. */
export class RawCaller {
  readonly frames: Frame[] = [];
  readonly headers = new Map<number, HeaderField[][]>();
  closed = false;
  private readonly socket: net.Socket;
  private readonly reader = new FrameReader(16_384);
  private readonly decoder = new HpackDecoder();
  readonly encoder: HpackEncoder;

  /** `literalNames`: fields the caller never indexes (sent as literals not indexed, as a gRPC ID is). */
  constructor(port: number, settings: [number, number][] = [], literalNames: string[] = []) {
    this.encoder = new HpackEncoder({ literalNames: new Set(literalNames) });
    this.socket = net.connect(port, "127.0.0.1");
    this.socket.on("error", () => {});
    this.socket.on("close", () => {
      this.closed = true;
    });
    this.socket.on("data", (d: Buffer) => {
      for (const f of this.reader.push(d)) {
        this.frames.push(f);
        if (f.type === FRAME.HEADERS) {
          const list = this.headers.get(f.stream) ?? [];
          list.push(this.decoder.decode(f.payload));
          this.headers.set(f.stream, list);
        }
      }
    });
    const payload = Buffer.alloc(settings.length * 6);
    settings.forEach(([id, value], i) => {
      payload.writeUInt16BE(id, i * 6);
      payload.writeUInt32BE(value, i * 6 + 2);
    });
    this.socket.write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    this.write(FRAME.SETTINGS, 0, 0, payload);
  }

  write(type: number, flags: number, stream: number, payload: Uint8Array): void {
    this.socket.write(RawCaller.bytes(type, flags, stream, payload));
  }

  /** A frame's bytes. */
  static bytes(type: number, flags: number, stream: number, payload: Uint8Array): Buffer {
    const head = Buffer.alloc(9);
    head.writeUIntBE(payload.length, 0, 3);
    head[3] = type;
    head[4] = flags;
    head.writeUInt32BE(stream, 5);
    return Buffer.concat([head, payload]);
  }

  /** Frames written together, in one write (so that the proxy reads them in one chunk). */
  together(frames: Buffer[]): void {
    this.socket.write(Buffer.concat(frames));
  }

  /** A request's HEADERS frame (one frame, END_HEADERS), with END_STREAM unless `open`. */
  requestFrame(
    stream: number,
    fields: HeaderField[],
    open = false,
    flags = 0,
    prefix = Buffer.alloc(0),
  ): Buffer {
    const block = this.encoder.encode([
      { name: ":method", value: "GET" },
      { name: ":scheme", value: "http" },
      { name: ":authority", value: "x" },
      ...fields,
    ]);
    const all = FLAG.END_HEADERS | (open ? 0 : FLAG.END_STREAM) | flags;
    return RawCaller.bytes(FRAME.HEADERS, all, stream, Buffer.concat([prefix, block]));
  }

  /** A request's HEADERS (one frame, END_HEADERS), with END_STREAM unless `open`. */
  request(stream: number, fields: HeaderField[], open = false): void {
    this.socket.write(this.requestFrame(stream, fields, open));
  }

  async frame(what: string, match: (f: Frame) => boolean): Promise<Frame> {
    await waitUntil(what, () => this.frames.some(match), 10_000);
    return this.frames.find(match) as Frame;
  }

  /** The status the proxy or target answered on `stream`. */
  async status(stream: number): Promise<string> {
    await waitUntil(`the answer on stream ${stream}`, () => this.headers.has(stream), 10_000);
    return this.headers.get(stream)?.[0]?.find((f) => f.name === ":status")?.value ?? "";
  }

  rst(stream: number): Promise<number> {
    return this.frame(
      `RST_STREAM on ${stream}`,
      (f) => f.type === FRAME.RST_STREAM && f.stream === stream,
    ).then((f) => Buffer.from(f.payload).readUInt32BE(0));
  }

  close(): void {
    this.socket.destroy();
  }
}
