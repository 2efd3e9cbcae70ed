import type { Readable } from "node:stream";

/**
 * Reads a body to its end, up to `limit` bytes. Returns undefined (and stops reading) when the body is
 * larger; the caller answers 413 or 502 and the connection is not reused for the rest.
 */
export async function readBody(
  body: Readable | string | Uint8Array,
  limit: number,
): Promise<Uint8Array | undefined> {
  if (typeof body === "string" || body instanceof Uint8Array) {
    const bytes = typeof body === "string" ? new TextEncoder().encode(body) : body;
    return bytes.length > limit ? undefined : bytes;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const b = typeof chunk === "string" ? Buffer.from(chunk) : (chunk as Buffer);
    size += b.length;
    if (size > limit) {
      body.destroy();
      return undefined;
    }
    chunks.push(b);
  }
  return new Uint8Array(Buffer.concat(chunks, size));
}
