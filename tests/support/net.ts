import { connect, createServer } from "node:net";

/** A free loopback port (bound and released; fine for a single-user test machine). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Resolves once something accepts TCP connections on the loopback port; bounded by `timeoutMs`. */
export async function waitForPort(port: number, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const open = await new Promise<boolean>((resolve) => {
      const s = connect(port, "127.0.0.1", () => {
        s.destroy();
        resolve(true);
      });
      s.on("error", () => resolve(false));
    });
    if (open) return;
    await Bun.sleep(100);
  }
  throw new Error(`nothing accepted connections on 127.0.0.1:${port} within ${timeoutMs / 1000}s`);
}

/**
 * Connects and reads until the first newline (included), then closes. For streams that do not pass the
 * peer's FIN back (kubectl port-forward), where reading to the end would wait forever.
 */
export function readLine(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, "127.0.0.1");
    let data = "";
    s.on("data", (d) => {
      data += d;
      if (data.includes("\n")) {
        s.destroy();
        resolve(data);
      }
    });
    s.on("error", reject);
  });
}
