import { connect, createServer } from "node:net";

/** Ports this process handed out already: the kernel may offer a port again once it is closed. */
const handedOut = new Set<number>();

/**
 * A loopback port nothing listens on, and that no earlier call of this process returned (two listeners
 * of one test never get the same port).
 */
export async function freePort(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = await unusedPort();
    if (handedOut.has(port)) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error("freePort: the kernel offered only ports handed out already, 50 times");
}

function unusedPort(): Promise<number> {
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
