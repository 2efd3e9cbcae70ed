import {
  asBytes,
  asDouble,
  asNumber,
  asString,
  decodeMapEntry,
  encodeMapEntry,
  ProtoWriter,
  readFields,
} from "./protobuf.ts";

/**
 * The SPIFFE Workload API messages (spiffe/spiffe standards/workloadapi.proto; the proto has no
 * package, so methods are `/SpiffeWorkloadAPI/<Rpc>`). Byte fields hold ASN.1 DER; map keys are
 * trust-domain SPIFFE IDs.
 */
export const SERVICE = "SpiffeWorkloadAPI";

export interface X509SvidMessage {
  spiffeId: string;
  x509Svid: Uint8Array;
  x509SvidKey: Uint8Array;
  bundle: Uint8Array;
  hint: string;
}
export interface X509SvidResponse {
  svids: X509SvidMessage[];
  crl: Uint8Array[];
  federatedBundles: Map<string, Uint8Array>;
}
export interface X509BundlesResponse {
  crl: Uint8Array[];
  bundles: Map<string, Uint8Array>;
}
export interface JwtSvidRequest {
  audience: string[];
  spiffeId: string;
}
export interface JwtSvidMessage {
  spiffeId: string;
  svid: string;
  hint: string;
}
export interface JwtSvidResponse {
  svids: JwtSvidMessage[];
}
export interface JwtBundlesResponse {
  bundles: Map<string, Uint8Array>;
}
export interface ValidateJwtSvidRequest {
  audience: string;
  svid: string;
}
export type JsonValue = null | number | string | boolean | JsonValue[] | { [key: string]: JsonValue };
export interface ValidateJwtSvidResponse {
  spiffeId: string;
  claims: Record<string, JsonValue>;
}

const writeMap = (w: ProtoWriter, field: number, m: Map<string, Uint8Array>) => {
  for (const [k, v] of m) w.message(field, encodeMapEntry(k, v));
};

export const empty = {
  encode: (): Uint8Array => new Uint8Array(),
  decode: (_: Uint8Array): Record<string, never> => ({}),
};

export const x509SvidResponse = {
  encode(r: X509SvidResponse): Uint8Array {
    const w = new ProtoWriter();
    for (const s of r.svids) {
      const svid = new ProtoWriter()
        .string(1, s.spiffeId)
        .bytes(2, s.x509Svid)
        .bytes(3, s.x509SvidKey)
        .bytes(4, s.bundle)
        .string(5, s.hint)
        .finish();
      w.message(1, svid);
    }
    for (const c of r.crl) w.bytes(2, c, true);
    writeMap(w, 3, r.federatedBundles);
    return w.finish();
  },
  decode(buf: Uint8Array): X509SvidResponse {
    const r: X509SvidResponse = { svids: [], crl: [], federatedBundles: new Map() };
    for (const f of readFields(buf)) {
      if (f.field === 1) {
        const s: X509SvidMessage = {
          spiffeId: "",
          x509Svid: new Uint8Array(),
          x509SvidKey: new Uint8Array(),
          bundle: new Uint8Array(),
          hint: "",
        };
        for (const g of readFields(asBytes(f))) {
          if (g.field === 1) s.spiffeId = asString(g);
          else if (g.field === 2) s.x509Svid = asBytes(g);
          else if (g.field === 3) s.x509SvidKey = asBytes(g);
          else if (g.field === 4) s.bundle = asBytes(g);
          else if (g.field === 5) s.hint = asString(g);
        }
        r.svids.push(s);
      } else if (f.field === 2) r.crl.push(asBytes(f));
      else if (f.field === 3) r.federatedBundles.set(...decodeMapEntry(asBytes(f)));
    }
    return r;
  },
};

export const x509BundlesResponse = {
  encode(r: X509BundlesResponse): Uint8Array {
    const w = new ProtoWriter();
    for (const c of r.crl) w.bytes(1, c, true);
    writeMap(w, 2, r.bundles);
    return w.finish();
  },
  decode(buf: Uint8Array): X509BundlesResponse {
    const r: X509BundlesResponse = { crl: [], bundles: new Map() };
    for (const f of readFields(buf)) {
      if (f.field === 1) r.crl.push(asBytes(f));
      else if (f.field === 2) r.bundles.set(...decodeMapEntry(asBytes(f)));
    }
    return r;
  },
};

export const jwtSvidRequest = {
  encode(r: JwtSvidRequest): Uint8Array {
    const w = new ProtoWriter();
    for (const a of r.audience) w.bytes(1, new TextEncoder().encode(a), true);
    return w.string(2, r.spiffeId).finish();
  },
  decode(buf: Uint8Array): JwtSvidRequest {
    const r: JwtSvidRequest = { audience: [], spiffeId: "" };
    for (const f of readFields(buf)) {
      if (f.field === 1) r.audience.push(asString(f));
      else if (f.field === 2) r.spiffeId = asString(f);
    }
    return r;
  },
};

export const jwtSvidResponse = {
  encode(r: JwtSvidResponse): Uint8Array {
    const w = new ProtoWriter();
    for (const s of r.svids)
      w.message(1, new ProtoWriter().string(1, s.spiffeId).string(2, s.svid).string(3, s.hint).finish());
    return w.finish();
  },
  decode(buf: Uint8Array): JwtSvidResponse {
    const r: JwtSvidResponse = { svids: [] };
    for (const f of readFields(buf)) {
      if (f.field !== 1) continue;
      const s: JwtSvidMessage = { spiffeId: "", svid: "", hint: "" };
      for (const g of readFields(asBytes(f))) {
        if (g.field === 1) s.spiffeId = asString(g);
        else if (g.field === 2) s.svid = asString(g);
        else if (g.field === 3) s.hint = asString(g);
      }
      r.svids.push(s);
    }
    return r;
  },
};

export const jwtBundlesResponse = {
  encode(r: JwtBundlesResponse): Uint8Array {
    const w = new ProtoWriter();
    writeMap(w, 1, r.bundles);
    return w.finish();
  },
  decode(buf: Uint8Array): JwtBundlesResponse {
    const r: JwtBundlesResponse = { bundles: new Map() };
    for (const f of readFields(buf)) if (f.field === 1) r.bundles.set(...decodeMapEntry(asBytes(f)));
    return r;
  },
};

export const validateJwtSvidRequest = {
  encode: (r: ValidateJwtSvidRequest): Uint8Array =>
    new ProtoWriter().string(1, r.audience).string(2, r.svid).finish(),
  decode(buf: Uint8Array): ValidateJwtSvidRequest {
    const r = { audience: "", svid: "" };
    for (const f of readFields(buf)) {
      if (f.field === 1) r.audience = asString(f);
      else if (f.field === 2) r.svid = asString(f);
    }
    return r;
  },
};

// google.protobuf.Struct / Value / ListValue. Value is a oneof, so its member is written even at
// its default: null_value (1, varint), number_value (2, fixed64), bool_value (4, varint) as raw bytes.
function encodeValue(v: JsonValue): Uint8Array {
  if (v === null) return Uint8Array.of(0x08, 0x00);
  if (typeof v === "boolean") return Uint8Array.of(0x20, v ? 1 : 0);
  if (typeof v === "number") {
    const b = new Uint8Array(9);
    b[0] = 0x11;
    new DataView(b.buffer).setFloat64(1, v, true);
    return b;
  }
  const w = new ProtoWriter();
  if (typeof v === "string") return w.bytes(3, new TextEncoder().encode(v), true).finish();
  if (Array.isArray(v)) {
    const list = new ProtoWriter();
    for (const item of v) list.message(1, encodeValue(item));
    return w.message(6, list.finish()).finish();
  }
  return w.message(5, encodeStruct(v)).finish();
}

export function encodeStruct(s: Record<string, JsonValue>): Uint8Array {
  const w = new ProtoWriter();
  for (const [k, v] of Object.entries(s)) {
    w.message(1, new ProtoWriter().string(1, k).message(2, encodeValue(v)).finish());
  }
  return w.finish();
}

function decodeValue(buf: Uint8Array): JsonValue {
  let out: JsonValue = null;
  for (const f of readFields(buf)) {
    if (f.field === 1) out = null;
    else if (f.field === 2) out = asDouble(f);
    else if (f.field === 3) out = asString(f);
    else if (f.field === 4) out = asNumber(f) !== 0;
    else if (f.field === 5) out = decodeStruct(asBytes(f));
    else if (f.field === 6)
      out = [...readFields(asBytes(f))].filter((g) => g.field === 1).map((g) => decodeValue(asBytes(g)));
  }
  return out;
}

export function decodeStruct(buf: Uint8Array): Record<string, JsonValue> {
  const out: Record<string, JsonValue> = {};
  for (const f of readFields(buf)) {
    if (f.field !== 1) continue;
    const [k, v] = decodeMapEntry(asBytes(f));
    // An own property even for keys such as __proto__, which plain assignment would treat as the prototype.
    Object.defineProperty(out, k, {
      value: decodeValue(v),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

export const validateJwtSvidResponse = {
  encode: (r: ValidateJwtSvidResponse): Uint8Array =>
    new ProtoWriter().string(1, r.spiffeId).message(2, encodeStruct(r.claims)).finish(),
  decode(buf: Uint8Array): ValidateJwtSvidResponse {
    const r: ValidateJwtSvidResponse = { spiffeId: "", claims: {} };
    for (const f of readFields(buf)) {
      if (f.field === 1) r.spiffeId = asString(f);
      else if (f.field === 2) r.claims = decodeStruct(asBytes(f));
    }
    return r;
  },
};
