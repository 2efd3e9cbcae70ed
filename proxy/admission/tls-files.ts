/**
 * A serving certificate and key read from files and read again when they change: on any change in their
 * directories (a Kubernetes Secret volume swaps a symlink), and every `pollMs` as a backstop. A pair that
 * does not load (a half-written file, a key that does not match) is reported and the previous one kept.
 */
import { type FSWatcher, readFileSync, statSync, watch } from "node:fs";
import { dirname } from "node:path";
import { createSecureContext } from "node:tls";

export interface TlsPair {
  cert: string;
  key: string;
}

export function readTlsPair(certFile: string, keyFile: string): TlsPair {
  const pair = { cert: readFileSync(certFile, "utf8"), key: readFileSync(keyFile, "utf8") };
  createSecureContext(pair); // throws when the key does not match the certificate, or either is not PEM
  return pair;
}

export function watchTlsPair(
  certFile: string,
  keyFile: string,
  onChange: (pair: TlsPair) => void,
  onError: (message: string) => void,
  pollMs = 30_000,
): { close(): void } {
  const stamp = () =>
    [certFile, keyFile]
      .map((f) => {
        try {
          const s = statSync(f);
          return `${s.ino}:${s.size}:${s.mtimeMs}`;
        } catch {
          return "missing";
        }
      })
      .join("|");
  let last = stamp();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const check = () => {
    timer = undefined;
    const now = stamp();
    if (now === last) return;
    last = now;
    try {
      onChange(readTlsPair(certFile, keyFile));
    } catch (e) {
      onError(`${(e as Error).message}; still serving the previous certificate`);
    }
  };
  // Several events arrive for one update: settle before reading.
  const soon = () => {
    if (!timer) timer = setTimeout(check, 200);
  };
  const watchers: FSWatcher[] = [];
  for (const dir of new Set([dirname(certFile), dirname(keyFile)])) {
    try {
      const w = watch(dir, soon);
      // A watcher that fails (its directory removed, say) is closed; the poll goes on.
      w.on("error", (e) => {
        onError(`stopped watching ${dir} (${e.message}); checking every ${pollMs / 1000}s`);
        w.close();
      });
      watchers.push(w);
    } catch (e) {
      onError(`cannot watch ${dir} (${(e as Error).message}); checking every ${pollMs / 1000}s`);
    }
  }
  const poll = setInterval(check, pollMs);
  poll.unref();
  return {
    close() {
      clearInterval(poll);
      if (timer) clearTimeout(timer);
      for (const w of watchers) w.close();
    },
  };
}
