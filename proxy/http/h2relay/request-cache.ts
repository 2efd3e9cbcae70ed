/**
 * The last request head a caller sent, and what the relay made of it, for a caller that sends every call
 * alike (a gRPC client calling one method): passed on again while neither HPACK table has changed
 * (table-state.ts), since the same fields always pass the policy the same way. Only the request ID
 * differs from call to call, so it is kept out of the cache:
 *
 * - the fields are encoded without it, and it is sent after them (h2-fields.ts);
 * - a block that ends in the caller's X-Request-Id, sent as a literal not indexed, is kept without that
 *   last field. A later block that starts with the kept octets is decoded from there on only; when the
 *   rest is one X-Request-Id, the kept encoding serves with that ID, and otherwise the fields decoded so
 *   far go through the policy as usual.
 */
import { copyOf, holdsAt } from "../../../lib/bytes.ts";
import type { Octets } from "../../../lib/http2/frames.ts";
import {
  entrySize,
  type HeaderField,
  HeaderListTooLarge,
  type HpackDecoder,
  type HpackEncoder,
} from "../../../lib/http2/hpack.ts";
import { invalidField } from "../h2-fields.ts";
import { REQUEST_ID_HEADER } from "../headers.ts";
import { TableState } from "./table-state.ts";

/** What the kept encoding serves: the fields for the target (without the request ID), and for the log. */
export interface KeptRequest {
  out: Uint8Array;
  method: string;
  path: string;
  /** The request's Content-Length (-1: none). */
  contentLength: number;
}

/**
 * A look-up's answer: the kept request and the caller's request ID (if the block carried one), with the
 * block's fields (`decoded`, then `last` if the block went on past the kept octets: for a block that turns
 * out not to open a request); or the block's fields decoded (part from the cache, part from the block);
 * or a header list over the limit.
 */
export type Lookup =
  | {
      kept: KeptRequest;
      requestId: HeaderField | undefined;
      decoded: readonly HeaderField[];
      last: HeaderField | undefined;
    }
  | { fields: HeaderField[] }
  | { tooLarge: true };

export class RequestCache {
  /** The kept block, without a last X-Request-Id, and the fields it decodes to. */
  private prefix: Uint8Array | undefined;
  private fields: HeaderField[] = [];
  /** The first X-Request-Id among those fields: the request's, whatever follows (h2-fields.ts). */
  private prefixId: HeaderField | undefined;
  private listSize = 0;
  private kept: KeptRequest | undefined;
  private readonly tables: TableState;

  constructor(
    private readonly decoder: HpackDecoder,
    encoder: HpackEncoder,
    private readonly maxHeaderListSize: number,
  ) {
    this.tables = new TableState(decoder, encoder);
  }

  /**
   * The answer for `block`, or undefined when it must be decoded as usual (nothing was read from it).
   * May decode the part of the block after the kept octets: its errors are the block's.
   */
  get(block: Octets): Lookup | undefined {
    const prefix = this.prefix;
    const kept = this.kept;
    const { src, start, end } = block;
    if (!prefix || !kept || end - start < prefix.length) return undefined;
    if (!this.tables.unchanged || !holdsAt(src, start, prefix)) return undefined;
    if (end - start === prefix.length) return this.served(kept, this.prefixId, undefined);
    // A literal not indexed (0000xxxx, 0001xxxx) leaves the table alone; anything else (an indexed
    // field, a table size update) is decoded with the whole block.
    const rest = start + prefix.length;
    if (((src[rest] as number) & 0xe0) !== 0) return undefined;
    let tail: HeaderField[];
    try {
      tail = this.decoder.decode(src, rest, end);
    } catch (e) {
      if (e instanceof HeaderListTooLarge) return { tooLarge: true };
      throw e;
    }
    let size = this.listSize;
    for (const f of tail) size += entrySize(f.name, f.value);
    if (size > this.maxHeaderListSize) return { tooLarge: true };
    // One field sent as a literal not indexed left the table as it was. An ID the policy would refuse
    // goes to it with the other fields.
    const only = tail.length === 1 ? tail[0] : undefined;
    if (only?.name === REQUEST_ID_HEADER && !invalidField(only.name, only.value))
      return this.served(kept, this.prefixId ?? only, only);
    return { fields: [...this.fields, ...tail] };
  }

  /** The answer for a block served from the cache: one object, valid until the next look-up. */
  private readonly hit: Extract<Lookup, { kept: KeptRequest }> = {
    kept: { out: new Uint8Array(0), method: "", path: "", contentLength: -1 },
    requestId: undefined,
    decoded: [],
    last: undefined,
  };

  private served(
    kept: KeptRequest,
    requestId: HeaderField | undefined,
    last: HeaderField | undefined,
  ): Lookup {
    const hit = this.hit;
    hit.kept = kept;
    hit.requestId = requestId;
    hit.decoded = this.fields;
    hit.last = last;
    return hit;
  }

  /**
   * Keeps `block` (decoded whole to `fields`, its last field at `lastFieldAt`) and the encoding of its
   * fields for the target, when neither table changed while it was decoded and encoded (`decoderBefore`,
   * `encoderBefore`: their counts of changes before).
   */
  set(
    block: Octets,
    fields: HeaderField[],
    lastFieldAt: number,
    decoderBefore: number,
    encoderBefore: number,
    kept: KeptRequest,
  ): void {
    if (!this.tables.keep(decoderBefore, encoderBefore)) {
      this.prefix = undefined;
      return;
    }
    // The caller's X-Request-Id, when it is the block's last field and a literal not indexed (one that
    // differs every call), is left out. Anywhere else, or indexed (the same ID every call), it is part of
    // the kept octets, and the request's ID whenever they are served (prefixId).
    const last = fields[fields.length - 1];
    const withoutId = last?.name === REQUEST_ID_HEADER && ((block.src[lastFieldAt] as number) & 0xe0) === 0;
    this.prefix = copyOf(block.src, block.start, withoutId ? lastFieldAt : block.end);
    this.fields = withoutId ? fields.slice(0, -1) : fields;
    this.prefixId = this.fields.find((f) => f.name === REQUEST_ID_HEADER);
    this.listSize = 0;
    for (const f of this.fields) this.listSize += entrySize(f.name, f.value);
    this.kept = kept;
  }
}
