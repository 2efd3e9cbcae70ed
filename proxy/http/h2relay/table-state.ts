/**
 * When a header block the relay kept may be passed on again without decoding or encoding it
 * (block-cache.ts, request-cache.ts): the same octets, decoded while the decoder's table is as it was, are
 * the same fields, and the same fields, encoded while the encoder's table is as it was, are the same
 * octets. So a block is kept only when decoding and encoding it changed neither table, and served only
 * while both are as they were then: no entry is missed, none added twice.
 */
import type { HpackDecoder, HpackEncoder } from "../../../lib/http2/hpack.ts";

export class TableState {
  private decoderAt = -1;
  private encoderAt = -1;

  constructor(
    private readonly decoder: HpackDecoder,
    private readonly encoder: HpackEncoder,
  ) {}

  /**
   * Marks the tables as they are now, if neither changed since their counts of changes were
   * `decoderBefore` and `encoderBefore` (taken before a block was decoded and encoded): true if so.
   */
  keep(decoderBefore: number, encoderBefore: number): boolean {
    const unchanged =
      this.decoder.changes === decoderBefore && this.encoder.changes === encoderBefore && encoderBefore >= 0;
    this.decoderAt = unchanged ? decoderBefore : -1;
    this.encoderAt = unchanged ? encoderBefore : -1;
    return unchanged;
  }

  /** Both tables are as they were when a block was last kept (and one was). */
  get unchanged(): boolean {
    return (
      this.decoderAt >= 0 &&
      this.decoder.changes === this.decoderAt &&
      this.encoder.changes === this.encoderAt
    );
  }
}
