/**
 * What the gRPC benchmarks (bench/grpc.ts, bench/h2-hop-cost.ts) send: unary calls of a 64-byte message,
 * or server-streaming calls, from h2load (Debian's nghttp2-client) with HTTP/2 prior knowledge, as a gRPC
 * client sends them on the wire.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { spawn } from "bun";

export const UNARY = "/bench.Echo/Unary";
export const STREAM = "/bench.Echo/Stream";

/** Writes one unary request's body (the 5-byte gRPC prefix, then a 64-byte message) into `dir`. */
export function unaryRequest(dir: string): string {
  const message = Buffer.alloc(64, 120);
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(message.length, 1);
  const file = join(dir, "request.bin");
  writeFileSync(file, Buffer.concat([prefix, message]));
  return file;
}

/**
 * Runs h2load against `path` on `port` for `seconds` (or for the number of calls its `args` give with
 * -n): its report, and how many calls succeeded.
 */
export async function h2loadGrpc(o: {
  port: number;
  path: string;
  args: string[];
  seconds?: string;
  request: string;
  /** h2load's per-request log (start, status, duration). */
  log?: string;
}): Promise<{ out: string; succeeded: number }> {
  const p = spawn(
    [
      "h2load",
      ...o.args,
      ...(o.seconds ? ["-D", o.seconds] : []),
      "-d",
      o.request,
      "-H",
      "content-type: application/grpc",
      "-H",
      "te: trailers",
      ...(o.log ? ["--log-file", o.log] : []),
      `http://127.0.0.1:${o.port}${o.path}`,
    ],
    { stdout: "pipe" },
  );
  const out = await new Response(p.stdout).text();
  await p.exited;
  return { out, succeeded: Number(/(\d+) succeeded/.exec(out)?.[1] ?? 0) };
}
