import { accessSync, constants, createWriteStream, type WriteStream } from "node:fs";
import { dirname, resolve } from "node:path";
import { SvcError } from "../errors.ts";

/**
 * TLS key logging in the NSS key log format (what SSLKEYLOGFILE produces; Wireshark reads it).
 * Debugging only: whoever holds the file and a capture can decrypt the sessions.
 */
export interface KeyLog {
  write(line: Buffer | string): void;
  close(): void;
}

export function openKeyLog(path: string): KeyLog {
  const dir = dirname(resolve(path));
  try {
    accessSync(dir, constants.W_OK);
  } catch {
    throw new SvcError("usage", `keylog: the directory ${dir} of ${path} must exist and be writable`);
  }
  const stream: WriteStream = createWriteStream(path, { flags: "a", mode: 0o600 });
  stream.on("error", () => {});
  return {
    write(line) {
      const text = String(line);
      stream.write(text.endsWith("\n") ? text : `${text}\n`);
    },
    close() {
      stream.end();
    },
  };
}
