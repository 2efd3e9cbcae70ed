/**
 * HPACK, HTTP/2's header compression (RFC 7541), for the HTTP/2 relay: a decoder for the header blocks a
 * peer sends and an encoder for the blocks the proxy sends. No maintained JavaScript implementation
 * exists, so this one is proved rather than assumed (tests/unit/hpack.test.ts: the RFC's examples and
 * bounds; tests/integration/hpack-differential.test.ts: against Go's and Python's implementations).
 *
 * Names and values are latin1 text, one character per octet, so that any octet a peer sends survives a
 * decode and re-encode unchanged. A field sent "never indexed" (section 6.2.3) carries `never`, and the
 * encoder sends it so again, as an intermediary must.
 *
 * What a peer sends is bounded: an integer larger than MAX_INTEGER, a string running past the block, an
 * index outside both tables, a table size update above the size this side allows or after a header field,
 * and bad Huffman code are decoding errors (HpackError: the connection ends with COMPRESSION_ERROR). A
 * header list over `maxHeaderListSize` stops being collected as soon as it passes the limit; the block is
 * still read to its end, so that the dynamic table stays in step, and HeaderListTooLarge is thrown.
 */
import { STATIC_TABLE } from "./hpack-static.ts";
import { HuffmanError, huffmanDecode, huffmanEncode, huffmanLength, type Out } from "./huffman.ts";

export interface HeaderField {
  name: string;
  value: string;
  /** Sent as a literal never indexed (section 6.2.3): re-encoded the same way. */
  never?: boolean;
}

/** A header block that cannot be decoded: the connection's HPACK state is lost (COMPRESSION_ERROR). */
export class HpackError extends Error {}

/** A well-formed block whose header list is larger than allowed; the decoder's state is intact. */
export class HeaderListTooLarge extends Error {
  constructor(readonly limit: number) {
    super(`header list larger than ${limit} bytes`);
  }
}

/** The size of an entry (section 4.1), also the size a field adds to a header list (RFC 9113 6.5.2). */
export const entrySize = (name: string, value: string): number => name.length + value.length + 32;

/** No integer a peer sends may exceed this: lengths and indexes are bounded far below it anyway. */
const MAX_INTEGER = 2 ** 31 - 1;
/** Continuation octets of one integer, at most. */
const MAX_CONTINUATION = 9;
const EMPTY = new Uint8Array(0);
export const DEFAULT_TABLE_SIZE = 4096;

const STATIC_LENGTH = STATIC_TABLE.length;
/** Static indexes by name: the first with the name (as section 2.3.3 numbers them), and by value. */
const STATIC_BY_NAME = new Map<string, { index: number; values: Map<string, number> }>();
STATIC_TABLE.forEach(([name, value], i) => {
  let entry = STATIC_BY_NAME.get(name);
  if (!entry) {
    entry = { index: i + 1, values: new Map() };
    STATIC_BY_NAME.set(name, entry);
  }
  if (!entry.values.has(value)) entry.values.set(value, i + 1);
});

/**
 * The dynamic table (section 2.3.2): newest entry at index 1, evicted oldest first. An encoder's table
 * (`searchable`) also keeps, per name and per name and value, where its newest entry is, so that finding
 * one costs a look-up, not a scan.
 */
class DynamicTable {
  /** Entries, oldest first from `first` on. */
  private names: string[] = [];
  private values: string[] = [];
  private first = 0;
  /** Entries sliced off the front of the arrays: entry k of the arrays was the (dropped + k)th added. */
  private dropped = 0;
  private readonly byName: Map<string, number> | undefined;
  private readonly byField: Map<string, Map<string, number>> | undefined;
  size = 0;
  /** Counts the changes to the table (entries added, a new maximum). */
  changes = 0;

  constructor(
    public max: number,
    searchable = false,
  ) {
    if (searchable) {
      this.byName = new Map();
      this.byField = new Map();
    }
  }

  /** Entry `i` (1 = newest), or undefined. */
  at(i: number): [string, string] | undefined {
    const k = this.names.length - i;
    if (i < 1 || k < this.first) return undefined;
    return [this.names[k] as string, this.values[k] as string];
  }

  /** Adds an entry, evicting as needed; one larger than the table empties it (section 4.4). */
  add(name: string, value: string): void {
    this.changes++;
    const size = entrySize(name, value);
    this.evict(this.max - size);
    if (size > this.max) return;
    const position = this.dropped + this.names.length;
    this.names.push(name);
    this.values.push(value);
    this.size += size;
    if (this.byName && this.byField) {
      this.byName.set(name, position);
      let values = this.byField.get(name);
      if (!values) {
        values = new Map();
        this.byField.set(name, values);
      }
      values.set(value, position);
    }
  }

  setMax(max: number): void {
    this.changes++;
    this.max = max;
    this.evict(max);
  }

  /** Index (1 = newest) of the newest entry equal to name and value, and of the newest with the name. */
  find(name: string, value: string): { field: number; name: number } {
    const named = this.byName?.get(name);
    if (named === undefined) return { field: 0, name: 0 };
    const field = this.byField?.get(name)?.get(value);
    return {
      field: field === undefined ? 0 : this.dropped + this.names.length - field,
      name: this.dropped + this.names.length - named,
    };
  }

  private evict(room: number): void {
    while (this.size > room && this.first < this.names.length) {
      const name = this.names[this.first] as string;
      const value = this.values[this.first] as string;
      this.size -= entrySize(name, value);
      // The newest entry of a name (or field) is the last of them to go: then the look-ups forget it.
      const position = this.dropped + this.first;
      if (this.byName?.get(name) === position) this.byName.delete(name);
      const values = this.byField?.get(name);
      if (values?.get(value) === position) {
        values.delete(value);
        if (values.size === 0) this.byField?.delete(name);
      }
      this.first++;
    }
    // Evicted entries are dropped in bulk, so that adding stays cheap.
    if (this.first > 64 && this.first * 2 > this.names.length) {
      this.names = this.names.slice(this.first);
      this.values = this.values.slice(this.first);
      this.dropped += this.first;
      this.first = 0;
    }
  }
}

export class HpackDecoder {
  private readonly table: DynamicTable;
  /** The largest table size the peer may ask for: what this side announced (SETTINGS_HEADER_TABLE_SIZE). */
  private readonly maxTableSize: number;
  private readonly maxHeaderListSize: number;

  constructor(o: { maxTableSize?: number; maxHeaderListSize?: number } = {}) {
    this.maxTableSize = o.maxTableSize ?? DEFAULT_TABLE_SIZE;
    this.maxHeaderListSize = o.maxHeaderListSize ?? Number.POSITIVE_INFINITY;
    this.table = new DynamicTable(this.maxTableSize);
  }

  /** The dynamic table's size now (section 4.1), for tests and diagnostics. */
  get tableSize(): number {
    return this.table.size;
  }

  /**
   * Changes so far to the dynamic table. A block whose decoding left it unchanged decodes to the same
   * list again for as long as it stays so.
   */
  get changes(): number {
    return this.table.changes;
  }

  /** Where the last field of the last block decoded starts (a cache keeps the octets before it). */
  lastFieldAt = 0;

  /** Decodes one complete header block (HEADERS and its CONTINUATIONs, joined): `block[start..end)`. */
  decode(block: Uint8Array, start = 0, end = block.length): HeaderField[] {
    const fields: HeaderField[] = [];
    this.src = block;
    this.p = start;
    this.end = end;
    this.listSize = 0;
    this.tooLarge = false;
    let fieldAt = start;
    let sawField = false;
    try {
      while (this.p < end) {
        fieldAt = this.p;
        const b = block[this.p] as number;
        if (b & 0x80) {
          const [name, value] = this.at(this.integer(7));
          this.emit(fields, name, value, false);
          sawField = true;
        } else if (b & 0x40) {
          const index = this.integer(6);
          const name = index ? this.at(index)[0] : this.string();
          const value = this.string();
          this.table.add(name, value);
          this.emit(fields, name, value, false);
          sawField = true;
        } else if (b & 0x20) {
          if (sawField) throw new HpackError("dynamic table size update after a header field");
          const size = this.integer(5);
          if (size > this.maxTableSize)
            throw new HpackError(
              `dynamic table size update to ${size}, above the ${this.maxTableSize} allowed`,
            );
          this.table.setMax(size);
        } else {
          const never = (b & 0x10) !== 0;
          const index = this.integer(4);
          const name = index ? this.at(index)[0] : this.string();
          this.emit(fields, name, this.string(), never);
          sawField = true;
        }
      }
    } finally {
      this.src = EMPTY;
    }
    this.lastFieldAt = fieldAt;
    if (this.tooLarge) throw new HeaderListTooLarge(this.maxHeaderListSize);
    return fields;
  }

  // The block being decoded, where in it, and the size of its header list so far.
  private src: Uint8Array = EMPTY;
  private p = 0;
  private end = 0;
  private listSize = 0;
  private tooLarge = false;

  private integer(prefixBits: number): number {
    const block = this.src;
    const max = 2 ** prefixBits - 1;
    let v = (block[this.p++] as number) & max;
    if (v < max) return v;
    let scale = 1;
    for (let continued = 1; ; continued++) {
      if (this.p >= this.end) throw new HpackError("integer runs past the end of the header block");
      // Redundant zero octets are allowed, as far as a 64-bit reader takes them (Go's: 9).
      if (continued > MAX_CONTINUATION) throw new HpackError("integer encoding too long");
      const b = block[this.p++] as number;
      v += (b & 0x7f) * scale;
      if (v > MAX_INTEGER) throw new HpackError("integer too large");
      if ((b & 0x80) === 0) return v;
      scale *= 128;
    }
  }

  private string(): string {
    const block = this.src;
    if (this.p >= this.end) throw new HpackError("string missing at the end of the header block");
    const huffman = ((block[this.p] as number) & 0x80) !== 0;
    const length = this.integer(7);
    if (length > this.end - this.p) throw new HpackError("string runs past the end of the header block");
    const from = this.p;
    this.p += length;
    if (!huffman) return Buffer.prototype.toString.call(block, "latin1", from, this.p);
    try {
      return huffmanDecode(block, from, this.p);
    } catch (e) {
      if (e instanceof HuffmanError) throw new HpackError(e.message);
      throw e;
    }
  }

  private at(index: number): [string, string] {
    if (index === 0) throw new HpackError("index 0");
    const entry =
      index <= STATIC_LENGTH
        ? (STATIC_TABLE[index - 1] as [string, string])
        : this.table.at(index - STATIC_LENGTH);
    if (!entry) throw new HpackError(`index ${index} is in neither table`);
    return entry;
  }

  /** Adds a field to the list, until the list is over its bound: then it is emptied and stays so. */
  private emit(fields: HeaderField[], name: string, value: string, never: boolean): void {
    if (this.tooLarge) return;
    this.listSize += entrySize(name, value);
    if (this.listSize > this.maxHeaderListSize) {
      this.tooLarge = true;
      fields.length = 0;
      return;
    }
    fields.push(never ? { name, value, never } : { name, value });
  }
}

export class HpackEncoder {
  private readonly table: DynamicTable;
  /** The most this side's table may use, whatever the peer allows. */
  private readonly cap: number;
  /** Table size updates to send at the start of the next block (section 4.2): the smallest, then the last. */
  private smallest: number | undefined;
  private last: number | undefined;

  /** Where blocks are written, kept from one to the next. */
  private readonly out = new OctetWriter();
  /** The literals of `literalNames`, encoded once (encodeLiteral). */
  private readonly nameLiterals = new Map<string, Uint8Array>();

  /** Names whose values are sent as literals, never added to the table (see the constructor). */
  private readonly literalNames: ReadonlySet<string>;

  /**
   * `literalNames`: fields whose values differ in every block (a request ID): indexing them would only
   * evict the entries that do repeat, so they are sent as literals without indexing, and not coded.
   */
  constructor(o: { maxTableSize?: number; literalNames?: ReadonlySet<string> } = {}) {
    this.cap = o.maxTableSize ?? DEFAULT_TABLE_SIZE;
    this.table = new DynamicTable(Math.min(this.cap, DEFAULT_TABLE_SIZE), true);
    this.literalNames = o.literalNames ?? new Set();
  }

  /**
   * Changes so far to the dynamic table, and -1 while a table size update waits to be sent. A list whose
   * encoding left it unchanged encodes to the same octets again for as long as it stays so.
   */
  get changes(): number {
    return this.last === undefined ? this.table.changes : -1;
  }

  /** The peer's SETTINGS_HEADER_TABLE_SIZE: this side's table uses at most it (and at most its own cap). */
  setPeerMaxTableSize(size: number): void {
    const max = Math.min(size, this.cap);
    if (max === this.table.max && this.last === undefined) return;
    this.smallest = Math.min(this.smallest ?? max, max);
    this.last = max;
    this.table.setMax(max);
  }

  encode(fields: readonly HeaderField[]): Uint8Array {
    const out = this.out;
    out.length = 0;
    if (this.last !== undefined) {
      if ((this.smallest as number) < this.last) integer(out, 0x20, 5, this.smallest as number);
      integer(out, 0x20, 5, this.last);
      this.smallest = this.last = undefined;
    }
    for (const { name, value, never } of fields) {
      const known = STATIC_BY_NAME.get(name);
      const staticField = never ? undefined : known?.values.get(value);
      if (staticField) {
        integer(out, 0x80, 7, staticField);
        continue;
      }
      const dynamic = this.table.find(name, value);
      if (dynamic.field && !never) {
        integer(out, 0x80, 7, STATIC_LENGTH + dynamic.field);
        continue;
      }
      const nameIndex = known?.index ?? (dynamic.name ? STATIC_LENGTH + dynamic.name : 0);
      const unique = this.literalNames.has(name);
      const index = !never && !unique && entrySize(name, value) <= this.table.max;
      if (never) integer(out, 0x10, 4, nameIndex);
      else if (index) integer(out, 0x40, 6, nameIndex);
      else integer(out, 0x00, 4, nameIndex);
      if (!nameIndex) literal(out, name);
      // A value never seen again is sent as it is: coding it would cost both sides more than its octets.
      literal(out, value, unique);
      if (index) this.table.add(name, value);
    }
    return out.bytes.slice(0, out.length);
  }

  /**
   * What encode([field]) gives, written straight into a buffer of its size for a field of `literalNames`
   * (a request ID, one per request): such a name is in neither table, since this encoder never adds one,
   * so the field is its name's literal, then the value as it is. Anything else goes through encode.
   */
  encodeLiteral(field: HeaderField): Uint8Array {
    const { name, value } = field;
    if (
      !this.literalNames.has(name) ||
      STATIC_BY_NAME.has(name) ||
      this.last !== undefined ||
      value.length >= 127
    )
      return this.encode([field]);
    let nameOctets = this.nameLiterals.get(name);
    if (!nameOctets) {
      const w = new OctetWriter();
      literal(w, name);
      nameOctets = w.bytes.slice(0, w.length);
      this.nameLiterals.set(name, nameOctets);
    }
    const out = new Uint8Array(2 + nameOctets.length + value.length);
    out[0] = field.never ? 0x10 : 0x00;
    let at = 1;
    for (let i = 0; i < nameOctets.length; i++) out[at++] = nameOctets[i] as number;
    out[at++] = value.length;
    for (let i = 0; i < value.length; i++) out[at++] = value.charCodeAt(i) & 0xff;
    return out;
  }
}

/** Octets as they are written, in a buffer that grows as needed. */
class OctetWriter {
  bytes = new Uint8Array(256);
  length = 0;

  push(b: number): void {
    if (this.length === this.bytes.length) {
      const more = new Uint8Array(this.bytes.length * 2);
      more.set(this.bytes);
      this.bytes = more;
    }
    this.bytes[this.length++] = b;
  }
}

/** An integer with an N-bit prefix (section 5.1), the prefix's other bits set to `flags`. */
export function integer(out: Out, flags: number, prefixBits: number, value: number): void {
  const max = 2 ** prefixBits - 1;
  if (value < max) {
    out.push(flags | value);
    return;
  }
  out.push(flags | max);
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
}

/**
 * A string literal (section 5.2): Huffman-coded unless that is longer (as RFC 7541 Appendix C codes), or
 * `raw`.
 */
function literal(out: Out, s: string, raw = false): void {
  const coded = raw ? s.length + 1 : huffmanLength(s);
  if (coded <= s.length) {
    integer(out, 0x80, 7, coded);
    huffmanEncode(s, out);
  } else {
    integer(out, 0x00, 7, s.length);
    for (let i = 0; i < s.length; i++) out.push(s.charCodeAt(i) & 0xff);
  }
}
