import { createHash } from "node:crypto";

/**
 * Notary object IDs are content addresses (docs/notary.md, "Formats"): base64url without padding of the
 * SHA-256 of the exact bytes — the compact JWS text for statements and receipts, the DER for certificates.
 */
export function contentId(bytes: string | Uint8Array): string {
  return createHash("sha256").update(bytes).digest("base64url");
}

/** SHA-256 as lowercase hex, the form body digests take inside receipts. */
function sha256Hex(bytes: string | Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** The shape of a SHA-256 hash in base64url: content IDs, roots and proof hashes in JSON. */
export const B64U_SHA256 = /^[A-Za-z0-9_-]{43}$/;

/** Whether `text` has the shape of a content ID (43 base64url characters). */
export function isContentId(text: string): boolean {
  return B64U_SHA256.test(text);
}

/** A body as a receipt records it: its length and SHA-256. */
export interface BodyDigest {
  length: number;
  sha256: string;
}

export function bodyDigest(body: Uint8Array | string): BodyDigest {
  const bytes = typeof body === "string" ? new TextEncoder().encode(body) : body;
  return { length: bytes.length, sha256: sha256Hex(bytes) };
}
