/**
 * What the notary keeps (certificates, workload statements, exchanges, receipts) and its log: every
 * record is appended as a leaf of one Merkle tree in the same transaction that stores it, and signed
 * tree heads are kept beside. Two implementations: SQLite (records-sqlite.ts, one replica) and PostgreSQL
 * (records-postgres.ts, any number of replicas). docs/notary.md.
 */
import { SvcError } from "../../lib/errors.ts";
import { type LeafKind, leafData } from "../../lib/notary-objects/log.ts";
import { decodeFrontier, type Frontier, frontierFits, type Hash } from "../../lib/notary-objects/merkle.ts";

/** How many witnesses must have cosigned a tree head, and which count (any when `by` is not given). */
export interface Witnessed {
  count: number;
  by?: readonly string[];
}

/** Cosignatures kept per witness (the newest). */
export const KEPT_COSIGNATURES = 64;

export interface Exchange {
  requestId: string;
  statementId: string;
  level: string;
  method: string;
  path: string;
  requestHeaders: Record<string, string>;
  requestBody: Uint8Array;
  status: number;
  responseHeaders: Record<string, string>;
  responseBody: Uint8Array;
}

export interface StoredObject {
  id: string;
  jws: string;
  createdAt: Date;
}

/** A receipt as logExchange stores it; a streamed one is also found by its stream's ID. */
export interface StoredReceipt {
  id: string;
  jws: string;
  streamId?: string;
}

export interface TreeHeadRow {
  size: number;
  root: Hash;
  jws: string;
}

/** A leaf with the bytes of the record it stands for now (undefined when the record is gone). */
export interface LoggedRecord {
  index: number;
  kind: LeafKind;
  ref: string;
  hash: Hash;
  data: Uint8Array | undefined;
}

export interface NotaryStore {
  /** Where the records are, for logs: a file path or a URL without its password. */
  readonly location: string;
  /**
   * Resolves once the store is usable (at once, unless a database server was unreachable at start:
   * then operations fail as unavailable until it is); rejects when the server refuses for good.
   */
  readonly connected: Promise<void>;
  /** Why the store is not usable yet (its server unreachable since start), or undefined. */
  unavailable(): string | undefined;
  putCertificate(id: string, der: Uint8Array, spiffeId: string, notAfter: Date): Promise<void>;
  putStatement(id: string, jws: string, subject: string, certificateId: string): Promise<void>;
  /** Records an exchange and, when given, its receipt, in one transaction. Returns the exchange's id. */
  logExchange(x: Exchange, receipt?: StoredReceipt): Promise<number>;
  /** The ID of the receipt of the stream the caller was told `streamId` (Svc-Stream-ID). */
  streamReceipt(streamId: string): Promise<string | undefined>;
  statement(id: string): Promise<(StoredObject & { subject: string; certificateId: string }) | undefined>;
  certificate(
    id: string,
  ): Promise<{ id: string; der: Uint8Array; spiffeId: string; notAfter: Date } | undefined>;
  receipt(id: string): Promise<(StoredObject & { statementId: string; exchange: Exchange }) | undefined>;
  /** Exchanges logged under an X-Request-Id (logRequest and signRequest), oldest first. */
  exchanges(requestId: string): Promise<Exchange[]>;

  /** The log's size and root now. */
  head(): Promise<{ size: number; root: Hash }>;
  leafIndex(kind: LeafKind, ref: string): Promise<number | undefined>;
  /** A complete subtree: level 0 is a leaf hash; throws when it is not stored. */
  node(level: number, index: number): Promise<Hash>;
  latestTreeHead(): Promise<TreeHeadRow | undefined>;
  /** The signed tree head kept for `size`, if one is. */
  treeHead(size: number): Promise<TreeHeadRow | undefined>;
  /** Keeps a signed tree head; one of the same size already kept wins. */
  putTreeHead(head: TreeHeadRow): Promise<void>;

  /**
   * Keeps a witness's cosignature of the kept tree head of `size` leaves, and that witness's
   * KEPT_COSIGNATURES most recent only: the newest cosigned head covers every older receipt (and after a
   * cut, the cosignatures of the log as it is now are the ones kept).
   */
  putCosignature(size: number, witness: string, jws: string): Promise<void>;
  /**
   * The newest kept tree head that covers leaf `index` and is cosigned by at least `need.count`
   * witnesses (of `need.by`, when given), with its cosignatures (theirs).
   */
  cosignedHead(
    index: number,
    need: Witnessed,
  ): Promise<{ head: TreeHeadRow; cosignatures: string[] } | undefined>;

  /** For the consistency check: leaves from `from` in order, at most `limit`. */
  leaves(from: number, limit: number): Promise<LoggedRecord[]>;
  treeHeads(): Promise<TreeHeadRow[]>;
  /** Records with no leaf: written around the notary. */
  unlogged(): Promise<{ kind: LeafKind; ref: string }[]>;
  close(): Promise<void>;
}

/** An exchange's record bytes in the log: canonical JSON, bodies in base64. */
function exchangeRecord(id: number, x: Exchange): Uint8Array {
  const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
  return new TextEncoder().encode(
    JSON.stringify({
      id,
      requestId: x.requestId,
      statementId: x.statementId,
      level: x.level,
      method: x.method,
      path: x.path,
      requestHeaders: x.requestHeaders,
      requestBody: b64(x.requestBody),
      status: x.status,
      responseHeaders: x.responseHeaders,
      responseBody: b64(x.responseBody),
    }),
  );
}

/**
 * The log leaf of a record, as either store keeps it: a certificate by its DER, a statement or receipt
 * by its JWS, an exchange by its record (exchangeRecord, under its row ID `ref`); undefined when the
 * record is gone (a leaf whose record a consistency check then misses).
 */
export function recordLeaf(
  kind: LeafKind,
  ref: string,
  stored: { der?: Uint8Array | null; jws?: string | null; exchange?: Exchange | null },
): Uint8Array | undefined {
  switch (kind) {
    case "certificate":
      return stored.der ? leafData(kind, stored.der) : undefined;
    case "statement":
    case "receipt":
      return stored.jws ? leafData(kind, stored.jws) : undefined;
    case "exchange":
      return stored.exchange ? leafData(kind, exchangeRecord(Number(ref), stored.exchange)) : undefined;
  }
}

/** An exchange from a database row (either store's columns have the same names). */
export function exchangeFromRow(r: Record<string, unknown>): Exchange {
  return {
    requestId: r.request_id as string,
    statementId: r.statement_id as string,
    level: r.level as string,
    method: r.method as string,
    path: r.path as string,
    requestHeaders: JSON.parse(r.request_headers as string),
    requestBody: new Uint8Array(r.request_body as Uint8Array),
    status: Number(r.status),
    responseHeaders: JSON.parse(r.response_headers as string),
    responseBody: new Uint8Array(r.response_body as Uint8Array),
  };
}

/** A statement from a database row (either store's columns have the same names). */
export function statementFromRow(
  r: Record<string, unknown>,
): StoredObject & { subject: string; certificateId: string } {
  return {
    id: r.id as string,
    jws: r.jws as string,
    subject: r.subject as string,
    certificateId: r.certificate_id as string,
    createdAt: new Date(Number(r.created_at)),
  };
}

/** A certificate from a database row (`not_after` in seconds). */
export function certificateFromRow(r: Record<string, unknown>): {
  id: string;
  der: Uint8Array;
  spiffeId: string;
  notAfter: Date;
} {
  return {
    id: r.id as string,
    der: r.der as Uint8Array,
    spiffeId: r.spiffe_id as string,
    notAfter: new Date(Number(r.not_after) * 1000),
  };
}

/** A receipt from a row of receipts joined with its exchange (`receipt_id`, `receipt_created_at`). */
export function receiptFromRow(
  r: Record<string, unknown>,
): StoredObject & { statementId: string; exchange: Exchange } {
  return {
    id: r.receipt_id as string,
    jws: r.jws as string,
    statementId: r.statement_id as string,
    createdAt: new Date(Number(r.receipt_created_at)),
    exchange: exchangeFromRow(r),
  };
}

/** The log head's right edge, refused when it cannot be that of a tree of `size` leaves. */
export function headFrontier(size: number, bytes: Uint8Array): Frontier {
  let frontier: Frontier | undefined;
  try {
    frontier = decodeFrontier(bytes);
  } catch {
    frontier = undefined;
  }
  if (!frontier || !Number.isSafeInteger(size) || !frontierFits(frontier, size))
    throw new SvcError(
      "notary_unavailable",
      `the notary log's head is corrupt (its right edge does not fit a tree of ${size} leaves); check the database with svc notary verify --database`,
    );
  return frontier;
}
