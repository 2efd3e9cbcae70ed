/**
 * A strict reader of ASN.1 DER, enough for X.509 certificates: single-byte tags, definite lengths
 * in their shortest form, nothing past the end of the enclosing element. Anything else throws.
 */
export interface Tlv {
  readonly tag: number;
  /** Where the value starts and ends in the buffer. */
  readonly start: number;
  readonly end: number;
}

export class DerError extends Error {}

export function readTlv(buf: Uint8Array, at: number, limit = buf.length): Tlv {
  if (at + 2 > limit) throw new DerError(`truncated element at byte ${at}`);
  const tag = buf[at] as number;
  if ((tag & 0x1f) === 0x1f) throw new DerError(`multi-byte tag at byte ${at}`);
  const first = buf[at + 1] as number;
  let length = first;
  let start = at + 2;
  if (first >= 0x80) {
    const n = first & 0x7f;
    if (n === 0) throw new DerError(`indefinite length at byte ${at}`);
    if (n > 4) throw new DerError(`length of ${n} bytes at byte ${at}`);
    if (start + n > limit) throw new DerError(`truncated length at byte ${at}`);
    length = 0;
    for (let k = 0; k < n; k++) length = length * 256 + (buf[start + k] as number);
    if (length < 0x80 || (buf[start] as number) === 0)
      throw new DerError(`length not in shortest form at byte ${at}`);
    start += n;
  }
  const end = start + length;
  if (end > limit) throw new DerError(`element at byte ${at} runs past its container`);
  return { tag, start, end };
}

/** The elements inside a constructed element, in order. */
export function children(buf: Uint8Array, parent: Tlv): Tlv[] {
  const out: Tlv[] = [];
  for (let at = parent.start; at < parent.end; ) {
    const c = readTlv(buf, at, parent.end);
    out.push(c);
    at = c.end;
  }
  return out;
}

export function expectTag(t: Tlv | undefined, tag: number, what: string): Tlv {
  if (!t || t.tag !== tag) throw new DerError(`${what}: expected tag 0x${tag.toString(16)}`);
  return t;
}

export function oidText(buf: Uint8Array, t: Tlv): string {
  const parts: number[] = [];
  let v = 0;
  for (let i = t.start; i < t.end; i++) {
    const b = buf[i] as number;
    v = v * 128 + (b & 0x7f);
    if (v > Number.MAX_SAFE_INTEGER / 128) throw new DerError("object identifier component too large");
    if (!(b & 0x80)) {
      if (parts.length === 0) parts.push(v < 80 ? Math.floor(v / 40) : 2, v < 80 ? v % 40 : v - 80);
      else parts.push(v);
      v = 0;
    }
  }
  if (t.start === t.end || (buf[t.end - 1] as number) & 0x80)
    throw new DerError("malformed object identifier");
  return parts.join(".");
}

/** A DER BOOLEAN: one byte, 0x00 or 0xff. */
export function readBoolean(buf: Uint8Array, t: Tlv): boolean {
  const b = buf[t.start];
  if (t.end - t.start !== 1 || (b !== 0 && b !== 0xff)) throw new DerError("malformed BOOLEAN");
  return b === 0xff;
}

/** A small non-negative INTEGER. */
export function readSmallInt(buf: Uint8Array, t: Tlv): number {
  const n = t.end - t.start;
  if (n === 0 || n > 4 || (buf[t.start] as number) & 0x80) throw new DerError("INTEGER out of range");
  let v = 0;
  for (let i = t.start; i < t.end; i++) v = v * 256 + (buf[i] as number);
  return v;
}

/** UTCTime (YYMMDDHHMMSSZ) or GeneralizedTime (YYYYMMDDHHMMSSZ), as RFC 5280 requires them. */
export function readTime(buf: Uint8Array, t: Tlv): Date {
  const s = Buffer.from(buf.subarray(t.start, t.end)).toString("latin1");
  const m =
    t.tag === 0x17 ? /^(\d{2})(\d{10})Z$/.exec(s) : t.tag === 0x18 ? /^(\d{4})(\d{10})Z$/.exec(s) : null;
  if (!m) throw new DerError(`malformed time ${JSON.stringify(s)}`);
  const y = Number(m[1]);
  const year = t.tag === 0x17 ? (y < 50 ? 2000 + y : 1900 + y) : y;
  const r = m[2] as string;
  const d = new Date(0);
  d.setUTCFullYear(year, Number(r.slice(0, 2)) - 1, Number(r.slice(2, 4)));
  d.setUTCHours(Number(r.slice(4, 6)), Number(r.slice(6, 8)), Number(r.slice(8, 10)));
  const back = [d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()];
  if (back.map((n) => String(n).padStart(2, "0")).join("") !== r) {
    throw new DerError(`impossible time ${JSON.stringify(s)}`);
  }
  return d;
}
