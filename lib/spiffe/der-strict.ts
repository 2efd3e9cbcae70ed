import { AsnConvert, AsnParser } from "@peculiar/asn1-schema";
import * as asn1js from "asn1js";

/**
 * Strict DER on top of asn1js. asn1js parses BER, and leniently: it lets an element run past the one that
 * contains it, reads indefinite and overlong lengths, and reports its failures in its own words. This holds
 * a parse to DER and to the limits below, and names each fault in our words: a DerFault, whose message is
 * the fault (asn1js's own failures translated, the text of an exception it threw never passed on):
 *
 * - at most MAX_ELEMENTS ASN.1 elements and MAX_DEPTH levels per parse: asn1js stops counting there, so
 *   the cost of a parse is bounded whatever a peer sends (the caller bounds the number of bytes);
 * - DER framing: definite lengths in their shortest form (at most 4 length octets) and within the element
 *   that contains them, single-byte tags, no end-of-contents octets, primitive and constructed encodings
 *   as the universal types require, nothing after the element parsed;
 * - DER contents: BOOLEAN as 0x00 or 0xff, minimal INTEGERs and OBJECT IDENTIFIERs, BIT STRING padding of
 *   at most 7 zero bits, UTF8String in UTF-8, BMPString and UniversalString of whole characters;
 * - schema(): what asn1-schema read must encode back to exactly the bytes read (it does not check every
 *   tag nor refuse every extra element), but for DEFAULT values written out, which Go and BoringSSL accept.
 *
 * Its user is the certificate reader (cert-reader.ts), which reports a DerFault as a CertReadError.
 */
/** Real certificates have 40 to 90 elements outside their extension values (the system roots: at most 86). */
export const MAX_ELEMENTS = 256;
const MAX_DEPTH = 16;

/** Options for every asn1js parse: the limits above, and OCTET/BIT STRING contents left unparsed. */
const BER_OPTIONS: asn1js.FromBerOptions = {
  maxDepth: MAX_DEPTH,
  maxNodes: MAX_ELEMENTS,
  // The caller bounds the input (cert-reader.ts: MAX_CERT_BYTES); a larger declared length must reach our
  // own check below, which names it ("runs past its container", "length of 5 bytes").
  maxContentLength: Number.MAX_SAFE_INTEGER,
  parseEmbedded: false,
};

/** A DER fault, in our words (the message). */
export class DerFault extends Error {}

/** The parts of an asn1js block this module and its user look at. */
export interface Block {
  error?: string;
  idBlock: {
    tagClass: number;
    tagNumber: number;
    isConstructed: boolean;
    blockLength: number;
    error?: string;
  };
  lenBlock: {
    isIndefiniteForm: boolean;
    longFormUsed: boolean;
    length: number;
    blockLength: number;
    error?: string;
  };
  valueBlock: { value?: unknown; error?: string; blockLength: number };
  valueBeforeDecodeView?: Uint8Array;
}

export const UNIVERSAL = 1;
/** The tag octet of a block (single-byte tags: the only ones DER here allows). */
export const tagByte = (b: Block) =>
  ((b.idBlock.tagClass - 1) << 6) | (b.idBlock.isConstructed ? 0x20 : 0) | (b.idBlock.tagNumber & 0x1f);

/** Where a block starts, when asn1js recorded it: ` at byte N`, or "". */
function at(b: Block, base: Uint8Array | undefined): string {
  const view = b.valueBeforeDecodeView;
  return view && base && view.buffer === base.buffer ? ` at byte ${view.byteOffset - base.byteOffset}` : "";
}

export function childrenOf(b: Block): Block[] {
  const v = b.valueBlock?.value;
  return b.idBlock?.isConstructed && Array.isArray(v) ? (v as Block[]) : [];
}

/** The content octets of a block that parsed (after its tag and length). */
export function contentOf(b: Block): Uint8Array {
  const view = b.valueBeforeDecodeView ?? new Uint8Array(0);
  return view.subarray(b.idBlock.blockLength + b.lenBlock.blockLength);
}

/** asn1js's own failures, in our words. */
function libraryFault(error: string): string {
  if (error.includes("inconsistent offset and length")) return "an element runs past its container";
  if (error === "Zero buffer length" || error.startsWith("End of input reached"))
    return "truncated element (its tag or length is cut off)";
  if (error.includes("node count")) return `more than ${MAX_ELEMENTS} ASN.1 elements`;
  if (error.includes("nesting depth")) return `ASN.1 nested deeper than ${MAX_DEPTH} levels`;
  if (error.includes("0xFF is reserved")) return "reserved length octet 0xff";
  if (error.includes("Constructed encoding used for primitive type"))
    return "constructed encoding of a primitive type";
  if (error.includes("Too big integer")) return "length of more than 8 bytes";
  if (error.includes("Unused bits")) return "malformed BIT STRING";
  if (error.includes("is reserved")) return "reserved tag";
  if (error.includes("Wrong input string")) return "malformed time";
  return `malformed DER (${error.slice(0, 120)})`;
}

/** An exception asn1js threw (rather than reported), in our words: its text is not passed on. */
function thrownFault(e: unknown): string {
  const message = e instanceof Error ? e.message : "";
  return message.includes("Wrong input string") ? "malformed time" : "an element the library cannot decode";
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** The universal types that are always constructed: EXTERNAL, EMBEDDED PDV, SEQUENCE, SET, CHARACTER STRING. */
const CONSTRUCTED_TYPES = new Set([8, 11, 16, 17, 29]);

/** The first DER fault in the header of `b` (tag and length octets), if any. */
function headerFault(b: Block): string | undefined {
  const id = b.idBlock;
  if (id.error) return libraryFault(id.error);
  if (id.blockLength !== 1) return "multi-byte tag";
  const len = b.lenBlock;
  if (len.error) return libraryFault(len.error);
  if (len.isIndefiniteForm) return "indefinite length";
  if (len.longFormUsed) {
    const n = len.blockLength - 1;
    if (n > 4) return `length of ${n} bytes`;
    if (len.length < 0x80 || len.length < 2 ** (8 * (n - 1))) return "length not in shortest form";
  }
  if (id.tagClass === UNIVERSAL && id.tagNumber === 0) return "end-of-contents octets out of place";
  if (id.tagClass === UNIVERSAL && CONSTRUCTED_TYPES.has(id.tagNumber) !== id.isConstructed)
    return id.isConstructed
      ? "constructed encoding of a primitive type"
      : "primitive encoding of a constructed type";
  return undefined;
}

/** The first DER fault in the contents of a primitive universal element, if any. */
function contentFault(b: Block): string | undefined {
  if (b.idBlock.tagClass !== UNIVERSAL || b.idBlock.isConstructed) return undefined;
  const c = contentOf(b);
  switch (b.idBlock.tagNumber) {
    case 1: // BOOLEAN
      return c.length === 1 && (c[0] === 0 || c[0] === 0xff) ? undefined : "malformed BOOLEAN";
    case 2: // INTEGER
    case 10: // ENUMERATED
      if (c.length === 0) return "empty INTEGER";
      if (
        c.length > 1 &&
        ((c[0] === 0 && !((c[1] as number) & 0x80)) || (c[0] === 0xff && (c[1] as number) & 0x80))
      )
        return "INTEGER not in minimal form";
      return undefined;
    case 3: {
      // BIT STRING: the count of unused bits, which must be zero bits.
      const unused = c[0];
      if (unused === undefined || unused > 7 || (c.length === 1 && unused !== 0))
        return "malformed BIT STRING";
      if (unused && (c[c.length - 1] as number) & ((1 << unused) - 1)) return "BIT STRING padding not zero";
      return undefined;
    }
    case 5: // NULL
      return c.length === 0 ? undefined : "malformed NULL";
    case 6: // OBJECT IDENTIFIER: each arc in its shortest form, the last one complete.
      if (c.length === 0 || (c[c.length - 1] as number) & 0x80) return "malformed object identifier";
      for (let i = 0; i < c.length; i++)
        if (c[i] === 0x80 && (i === 0 || !((c[i - 1] as number) & 0x80)))
          return "object identifier not in minimal form";
      return undefined;
    case 13: // RELATIVE-OID
      return c.length === 0 ? "empty RELATIVE-OID" : undefined;
    case 12: // UTF8String
      try {
        utf8.decode(c);
        return undefined;
      } catch {
        return "UTF8String not in UTF-8";
      }
    case 28: // UniversalString: UCS-4
      return c.length % 4 === 0 ? undefined : "malformed UniversalString";
    case 30: // BMPString: UCS-2
      return c.length % 2 === 0 ? undefined : "malformed BMPString";
    default:
      return undefined;
  }
}

/** The first DER fault in document order, walking what asn1js parsed (also a partial tree). */
function derFault(root: Block, base: Uint8Array | undefined): string | undefined {
  const stack: Block[] = [root];
  while (stack.length > 0) {
    const b = stack.pop() as Block;
    if (!b.idBlock || !b.lenBlock) return b.error ? libraryFault(b.error) : "malformed DER";
    const header = headerFault(b);
    if (header) return `${header}${at(b, base)}`;
    const kids = childrenOf(b);
    if (b.error && kids.length === 0) return libraryFault(b.error);
    if (b.error) {
      // The failing child was not kept: report what came before it, else the failure itself.
      const earlier = kids.map((k) => derFault(k, base)).find((f) => f !== undefined);
      return earlier ?? libraryFault(b.error);
    }
    // asn1js lets an element run past the one that contains it, as long as the input goes on.
    if (b.idBlock.isConstructed && b.valueBlock.blockLength !== b.lenBlock.length)
      return `an element runs past its container${at(b, base)}`;
    const content = contentFault(b);
    if (content) return `${content}${at(b, base)}`;
    for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i] as Block);
  }
  return undefined;
}

/** One DER element, whole: parsed by asn1js within the limits, then held to DER. */
export function parseDer(der: Uint8Array, what: string): Block {
  let parsed: asn1js.FromBerResult;
  try {
    parsed = asn1js.fromBER(der, BER_OPTIONS);
  } catch (e) {
    // asn1js throws (rather than reporting) on some malformed strings, e.g. times.
    const prefix = what === "certificate" ? "" : `${what}: `;
    throw new DerFault(`${prefix}${thrownFault(e)}`);
  }
  const root = parsed.result as unknown as Block;
  const prefix = what === "certificate" ? "" : `${what}: `;
  const fault = derFault(root, root.valueBeforeDecodeView);
  if (fault) throw new DerFault(`${prefix}${fault}`);
  if (parsed.offset === -1) throw new DerFault(`${prefix}${libraryFault(root.error ?? "")}`);
  if (parsed.offset !== der.length) throw new DerFault(`bytes after the ${what}`);
  return root;
}

/**
 * The first element of `bytes` as asn1js frames it within the limits, not yet held to DER (parseDer reads
 * it again, whole): its length in bytes, or -1 with asn1js's failure in our words when it named one; and
 * its tag octet. A DerFault when asn1js throws.
 */
export function frameElement(bytes: Uint8Array): {
  length: number;
  tag: number | undefined;
  fault: string | undefined;
} {
  let parsed: asn1js.FromBerResult;
  try {
    parsed = asn1js.fromBER(bytes, BER_OPTIONS);
  } catch (e) {
    throw new DerFault(thrownFault(e));
  }
  const block = parsed.result as unknown as Block;
  return {
    length: parsed.offset,
    tag: block.idBlock ? tagByte(block) : undefined,
    fault: parsed.offset === -1 && block.error ? libraryFault(block.error) : undefined,
  };
}

/**
 * `root` as the asn1-schema type `type`, which must encode back to the same bytes: asn1-schema does not
 * check every tag (a SEQUENCE field accepts any constructed element) nor refuse every extra element, so
 * what it read is held to be exactly what was sent. The one difference allowed is a DEFAULT value written
 * out (an explicit version 1, critical or cA FALSE, a minimum of 0), which DER forbids but Go's and
 * BoringSSL's readers accept.
 */
export function schema<T>(root: Block, type: new () => T, what: string, rfc = "RFC 5280"): T {
  const whole = what === "certificate";
  let value: T;
  let again: Uint8Array;
  try {
    value = AsnParser.fromASN(root as unknown as asn1js.AsnType, type);
    again = new Uint8Array(AsnConvert.serialize(value));
  } catch {
    throw new DerFault(
      whole
        ? `not an X.509 certificate (not the ASN.1 structure ${rfc} defines)`
        : `${what}: not the ASN.1 structure ${rfc} defines`,
    );
  }
  const input = root.valueBeforeDecodeView;
  if (input && Buffer.compare(again, input) === 0) return value;
  let back: Block | undefined;
  try {
    const parsed = asn1js.fromBER(again, BER_OPTIONS);
    if (parsed.offset === again.length) back = parsed.result as unknown as Block;
  } catch {
    // refused below
  }
  if (back && sameBut(root, back, isDefault)) return value;
  throw new DerFault(`${whole ? "" : `${what}: `}an element of the wrong type or out of place`);
}

/** DEFAULT values (X.690 11.5 says leave them out): BOOLEAN FALSE, [0] INTEGER 0 explicit or implicit. */
function isDefault(b: Block): boolean {
  const bytes = b.valueBeforeDecodeView;
  if (!bytes) return false;
  const hex = Buffer.from(bytes).toString("hex");
  return hex === "010100" || hex === "a003020100" || hex === "800100";
}

/** Whether `a` is `b` with, at most, some elements that `skippable` allows added. */
function sameBut(a: Block, b: Block, skippable: (x: Block) => boolean): boolean {
  if (tagByte(a) !== tagByte(b)) return false;
  if (!a.idBlock.isConstructed) return Buffer.compare(contentOf(a), contentOf(b)) === 0;
  const as = childrenOf(a);
  const bs = childrenOf(b);
  let j = 0;
  for (const x of as) {
    const y = bs[j];
    if (y && sameBut(x, y, skippable)) j++;
    else if (!skippable(x)) return false;
  }
  return j === bs.length;
}
