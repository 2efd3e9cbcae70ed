/**
 * The protobuf wire format (varints, length-delimited fields, fixed64), just enough for the
 * Workload API messages. Proto3 semantics: fields at their default value are not written.
 */
const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

export class ProtoWriter {
  private readonly chunks: Uint8Array[] = [];
  private size = 0;

  private push(chunk: Uint8Array): this {
    this.chunks.push(chunk);
    this.size += chunk.length;
    return this;
  }

  private varint(n: number): this {
    const out: number[] = [];
    let v = n;
    while (v >= 0x80) {
      out.push((v % 0x80) | 0x80);
      v = Math.floor(v / 0x80);
    }
    out.push(v);
    return this.push(Uint8Array.from(out));
  }

  private tag(field: number, wireType: number): this {
    return this.varint(field * 8 + wireType);
  }

  bytes(field: number, b: Uint8Array | undefined, always = false): this {
    if (!b || (b.length === 0 && !always)) return this;
    return this.tag(field, 2).varint(b.length).push(b);
  }

  string(field: number, s: string | undefined): this {
    return s ? this.bytes(field, utf8.encode(s)) : this;
  }

  /** A nested message; written even when empty, as presence matters for oneof and repeated fields. */
  message(field: number, body: Uint8Array): this {
    return this.bytes(field, body, true);
  }

  finish(): Uint8Array {
    const out = new Uint8Array(this.size);
    let at = 0;
    for (const c of this.chunks) {
      out.set(c, at);
      at += c.length;
    }
    return out;
  }
}

export type ProtoValue = number | bigint | Uint8Array;
export interface ProtoField {
  field: number;
  wireType: number;
  value: ProtoValue;
}

export class ProtoError extends Error {}

/** Reads every field of a message in order. Unknown fields are returned too; callers skip them. */
export function* readFields(buf: Uint8Array): Generator<ProtoField> {
  let i = 0;
  const varint = (): number => {
    let result = 0;
    let scale = 1;
    for (let n = 0; n < 10; n++) {
      if (i >= buf.length) throw new ProtoError("truncated varint");
      const byte = buf[i++] as number;
      result += (byte & 0x7f) * scale;
      if (byte < 0x80) return result;
      scale *= 0x80;
    }
    throw new ProtoError("varint too long");
  };
  while (i < buf.length) {
    const key = varint();
    const field = Math.floor(key / 8);
    const wireType = key % 8;
    let value: ProtoValue;
    if (wireType === 0) value = varint();
    else if (wireType === 1 || wireType === 5) {
      const n = wireType === 1 ? 8 : 4;
      if (i + n > buf.length) throw new ProtoError("truncated fixed field");
      value = buf.subarray(i, i + n);
      i += n;
    } else if (wireType === 2) {
      const len = varint();
      if (i + len > buf.length) throw new ProtoError(`truncated field ${field}`);
      value = buf.subarray(i, i + len);
      i += len;
    } else throw new ProtoError(`unsupported wire type ${wireType} for field ${field}`);
    yield { field, wireType, value };
  }
}

export function asBytes(f: ProtoField): Uint8Array {
  if (!(f.value instanceof Uint8Array) || f.wireType !== 2)
    throw new ProtoError(`field ${f.field} is not length-delimited`);
  return f.value;
}

export function asString(f: ProtoField): string {
  return fromUtf8.decode(asBytes(f));
}

export function asNumber(f: ProtoField): number {
  if (typeof f.value !== "number") throw new ProtoError(`field ${f.field} is not a varint`);
  return f.value;
}

export function asDouble(f: ProtoField): number {
  if (f.wireType !== 1 || !(f.value instanceof Uint8Array))
    throw new ProtoError(`field ${f.field} is not a double`);
  return new DataView(f.value.buffer, f.value.byteOffset, 8).getFloat64(0, true);
}

/** A map<string, bytes|message> entry: key = 1, value = 2. */
export function encodeMapEntry(key: string, value: Uint8Array): Uint8Array {
  return new ProtoWriter().string(1, key).bytes(2, value, true).finish();
}

export function decodeMapEntry(buf: Uint8Array): [string, Uint8Array] {
  let key = "";
  let value: Uint8Array = new Uint8Array();
  for (const f of readFields(buf)) {
    if (f.field === 1) key = asString(f);
    else if (f.field === 2) value = asBytes(f);
  }
  return [key, value];
}
