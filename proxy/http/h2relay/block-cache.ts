/**
 * The last header block of one kind a side sent (a response head, trailers), and what the relay made of
 * it, for a target that answers every call alike (gRPC's `:status 200` and `grpc-status 0`): passed on
 * again while neither HPACK table has changed (table-state.ts). Anything else is decoded and encoded as
 * usual.
 */
import { copyOf, holdsAt } from "../../../lib/bytes.ts";
import type { Octets } from "../../../lib/http2/frames.ts";
import type { HpackDecoder, HpackEncoder } from "../../../lib/http2/hpack.ts";
import { TableState } from "./table-state.ts";

export class BlockCache<T> {
  private block: Uint8Array | undefined;
  /** What the kept block was encoded as, and what was read from it. */
  private kept: { readonly out: Uint8Array; readonly value: T } | undefined;
  private readonly tables: TableState;

  constructor(decoder: HpackDecoder, encoder: HpackEncoder) {
    this.tables = new TableState(decoder, encoder);
  }

  /** What `block` was encoded as, and what was read from it, if neither table changed since. */
  get(block: Octets): { out: Uint8Array; value: T } | undefined {
    const kept = this.block;
    if (!kept || kept.length !== block.end - block.start) return undefined;
    if (!this.tables.unchanged || !holdsAt(block.src, block.start, kept)) return undefined;
    return this.kept;
  }

  /**
   * Keeps `block` and its encoding `out` when neither table changed while it was decoded and encoded
   * (`decoderBefore`, `encoderBefore`: their counts of changes before).
   */
  set(block: Octets, decoderBefore: number, encoderBefore: number, out: Uint8Array, value: T): void {
    if (!this.tables.keep(decoderBefore, encoderBefore)) {
      this.block = undefined;
      return;
    }
    this.block = copyOf(block.src, block.start, block.end);
    this.kept = { out, value };
  }
}
