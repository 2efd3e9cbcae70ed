/**
 * Checks a protobuf message against its schema before @bufbuild/protobuf decodes it, so that what a
 * Workload API server sends is refused with a reason naming the field (`truncated field 3`, `field 1 is
 * not length-delimited`) instead of being misread: the library reads a known field by its declared type
 * whatever wire type it came with (a varint where a string belongs is read as a length), and its own
 * errors ("premature EOF") name nothing.
 *
 * Checked: every tag and varint, every length against what is left, wire types 0, 1, 2 and 5 only (groups
 * are refused), the wire type of every known field (map entries included), UTF-8 in string fields, and
 * nesting at most {@link MAX_DEPTH} messages deep (the library's own recursion limit, counted the same
 * way). Unknown fields are skipped, as proto3 requires. Throws SvcError `workload_api`.
 */
import { type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";
import { SvcError } from "../errors.ts";

const MAX_DEPTH = 100;

const VARINT = 0;
const I64 = 1;
const LEN = 2;
const I32 = 5;

const fail = (reason: string) => new SvcError("workload_api", reason);
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** The wire type of a scalar, and how a mismatch is named. */
function scalarWire(t: ScalarType): [number, string] {
  switch (t) {
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return [LEN, "length-delimited"];
    case ScalarType.DOUBLE:
      return [I64, "a double"];
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return [I64, "a 64-bit fixed field"];
    case ScalarType.FLOAT:
      return [I32, "a float"];
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return [I32, "a 32-bit fixed field"];
    default:
      return [VARINT, "a varint"];
  }
}

interface Field {
  no: number;
  wireType: number;
  /** The payload of a length-delimited field. */
  bytes?: Uint8Array;
}

/** Every field of a message in order, with its value checked against the bounds of `buf`. */
function* fields(buf: Uint8Array): Generator<Field> {
  let i = 0;
  const varint = (): number => {
    let result = 0;
    let scale = 1;
    for (let n = 0; n < 10; n++) {
      if (i >= buf.length) throw fail("truncated varint");
      const byte = buf[i++] as number;
      result += (byte & 0x7f) * scale;
      if (byte < 0x80) return result;
      scale *= 0x80;
    }
    throw fail("varint too long");
  };
  while (i < buf.length) {
    const start = i;
    const key = varint();
    const no = Math.floor(key / 8);
    const wireType = key % 8;
    if (wireType !== VARINT && wireType !== I64 && wireType !== LEN && wireType !== I32)
      throw fail(`unsupported wire type ${wireType} for field ${no}`);
    // A tag is a uint32 of at most 5 bytes, and field numbers start at 1.
    if (no === 0 || key > 0xffffffff || i - start > 5) throw fail(`invalid tag for field ${no}`);
    if (wireType === VARINT) {
      varint();
      yield { no, wireType };
    } else if (wireType === I64 || wireType === I32) {
      i += wireType === I64 ? 8 : 4;
      if (i > buf.length) throw fail("truncated fixed field");
      yield { no, wireType };
    } else {
      const len = varint();
      if (i + len > buf.length) throw fail(`truncated field ${no}`);
      i += len;
      yield { no, wireType, bytes: buf.subarray(i - len, i) };
    }
  }
}

function expectWire(f: Field, wireType: number, what: string): void {
  if (f.wireType !== wireType) throw fail(`field ${f.no} is not ${what}`);
}

function checkString(f: Field): void {
  expectWire(f, LEN, "length-delimited");
  try {
    utf8.decode(f.bytes);
  } catch {
    throw fail(`field ${f.no} is not valid UTF-8`);
  }
}

function checkScalar(f: Field, t: ScalarType): void {
  if (t === ScalarType.STRING) checkString(f);
  else expectWire(f, ...scalarWire(t));
}

/** A packed repeated scalar: whole elements only. */
function checkPacked(f: Field, t: ScalarType): void {
  const body = f.bytes as Uint8Array;
  const [wireType] = scalarWire(t);
  if (wireType === VARINT) {
    let i = 0;
    while (i < body.length) {
      const start = i;
      while (i < body.length && (body[i] as number) >= 0x80) i++;
      if (i >= body.length) throw fail(`truncated field ${f.no}`);
      if (++i - start > 10) throw fail("varint too long");
    }
  } else if (body.length % (wireType === I64 ? 8 : 4) !== 0) throw fail(`truncated field ${f.no}`);
}

function checkMessage(f: Field, desc: DescMessage, depth: number): void {
  expectWire(f, LEN, "length-delimited");
  checkLevel(desc, f.bytes as Uint8Array, depth + 1);
}

/** A map entry: key = 1, value = 2; other fields are skipped. */
function checkEntry(field: DescField & { fieldKind: "map" }, entry: Field, depth: number): void {
  expectWire(entry, LEN, "length-delimited");
  for (const f of fields(entry.bytes as Uint8Array)) {
    if (f.no === 1) checkScalar(f, field.mapKey);
    else if (f.no !== 2) continue;
    else if (field.mapKind === "message") checkMessage(f, field.message, depth);
    else if (field.mapKind === "enum") expectWire(f, VARINT, "a varint");
    else checkScalar(f, field.scalar);
  }
}

function checkField(field: DescField, f: Field, depth: number): void {
  if (field.fieldKind === "scalar") checkScalar(f, field.scalar);
  else if (field.fieldKind === "enum") expectWire(f, VARINT, "a varint");
  else if (field.fieldKind === "message") checkMessage(f, field.message, depth);
  else if (field.fieldKind === "map") checkEntry(field, f, depth);
  else if (field.listKind === "message") checkMessage(f, field.message, depth);
  else {
    const scalar = field.listKind === "enum" ? ScalarType.INT32 : field.scalar;
    // Repeated numbers may come packed (one length-delimited field) or one by one.
    if (f.wireType === LEN && scalar !== ScalarType.STRING && scalar !== ScalarType.BYTES)
      checkPacked(f, scalar);
    else checkScalar(f, scalar);
  }
}

function checkLevel(desc: DescMessage, buf: Uint8Array, depth: number): void {
  if (depth > MAX_DEPTH) throw fail(`messages nested more than ${MAX_DEPTH} deep`);
  for (const f of fields(buf)) {
    const field = desc.fields.find((d) => d.number === f.no);
    if (field) checkField(field, f, depth);
  }
}

/** Throws SvcError `workload_api` naming the first fault of `buf` as a `desc` message. */
export function checkWire(desc: DescMessage, buf: Uint8Array): void {
  checkLevel(desc, buf, 1);
}
