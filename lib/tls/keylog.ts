/**
 * TLS key logging in the NSS key log format (what SSLKEYLOGFILE produces; Wireshark reads it).
 * Debugging only: whoever holds the file and a capture can decrypt the sessions. Lines are written
 * synchronously (a few per handshake), so none is lost when the process exits right after a connection.
 */
import { accessSync, closeSync, constants, openSync, writeSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { SvcError } from "../errors.ts";

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
  let fd: number;
  try {
    fd = openSync(path, "a", 0o600);
  } catch (e) {
    throw new SvcError(
      "usage",
      `keylog: cannot open ${path} for appending (${(e as NodeJS.ErrnoException).code})`,
    );
  }
  let open = true;
  return {
    write(line) {
      if (!open) return;
      const text = String(line);
      try {
        writeSync(fd, text.endsWith("\n") ? text : `${text}\n`);
      } catch {
        // A full disk must not break TLS: key logging is best effort.
      }
    },
    close() {
      if (!open) return;
      open = false;
      closeSync(fd);
    },
  };
}
