import { join } from "node:path";
import type { HeaderField } from "../../lib/http2/hpack.ts";
import { peer } from "../e2e/testbed/peers.ts";
import { ROOT } from "./proc.ts";

/**
 * The two reference HPACK implementations of the differential tests, each its own process speaking the
 * JSON-lines protocol of tests/support/hpack-peer.py: Debian's python3-hpack and Go's
 * golang.org/x/net/http2/hpack (built by `tests/e2e/build-peers.sh hpack`). Names and values travel as
 * hex.
 */
export type Answer = { fields: HeaderField[] } | { block: Uint8Array } | { error: string };

export class HpackPeer {
  private readonly proc;
  private readonly lines: string[] = [];
  private waiting: ((line: string) => void) | undefined;
  private partial = "";

  constructor(
    readonly name: string,
    command: string[],
  ) {
    this.proc = Bun.spawn(command, { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
    void this.read();
  }

  private async read(): Promise<void> {
    const decoder = new TextDecoder();
    for await (const chunk of this.proc.stdout) {
      this.partial += decoder.decode(chunk, { stream: true });
      for (let nl = this.partial.indexOf("\n"); nl >= 0; nl = this.partial.indexOf("\n")) {
        const line = this.partial.slice(0, nl);
        this.partial = this.partial.slice(nl + 1);
        const w = this.waiting;
        this.waiting = undefined;
        if (w) w(line);
        else this.lines.push(line);
      }
    }
  }

  private async ask(request: object): Promise<Record<string, unknown>> {
    this.proc.stdin.write(`${JSON.stringify(request)}\n`);
    await this.proc.stdin.flush();
    const line =
      this.lines.shift() ??
      (await new Promise<string>((resolve, reject) => {
        this.waiting = resolve;
        void this.proc.exited.then((code) => reject(new Error(`${this.name} exited ${code}`)));
      }));
    return JSON.parse(line);
  }

  async open(session: number, tableSize: number): Promise<void> {
    const r = await this.ask({ op: "new", session, tableSize });
    if (r.error) throw new Error(`${this.name}: ${r.error}`);
  }

  async decode(session: number, block: Uint8Array): Promise<Answer> {
    const r = await this.ask({ op: "decode", session, block: Buffer.from(block).toString("hex") });
    if (typeof r.error === "string") return { error: r.error };
    return {
      fields: (r.fields as [string, string, boolean][]).map(([n, v, never]) => ({
        name: Buffer.from(n, "hex").toString("latin1"),
        value: Buffer.from(v, "hex").toString("latin1"),
        ...(never ? { never: true } : {}),
      })),
    };
  }

  async encode(session: number, fields: HeaderField[], huffman = true): Promise<Answer> {
    const hex = (s: string) => Buffer.from(s, "latin1").toString("hex");
    const r = await this.ask({
      op: "encode",
      session,
      huffman,
      fields: fields.map((f) => [hex(f.name), hex(f.value), f.never === true]),
    });
    if (typeof r.error === "string") return { error: r.error };
    return { block: Uint8Array.from(Buffer.from(r.block as string, "hex")) };
  }

  async stop(): Promise<void> {
    this.proc.stdin.end();
    await this.proc.exited;
  }
}

export function startHpackPeers(): HpackPeer[] {
  return [
    new HpackPeer("python3-hpack", ["/usr/bin/python3", join(ROOT, "tests/support/hpack-peer.py")]),
    new HpackPeer("Go x/net/http2/hpack", [peer("hpackPeer")]),
  ];
}
