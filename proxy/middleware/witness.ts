/**
 * The witness routes (docs/notary.md, "Witnesses"): `POST /.svc/witness/add-checkpoint` (C2SP
 * tlog-witness's add-checkpoint: a notary pushes its checkpoint with the consistency proof from the one
 * the witness holds, and gets the cosignature) and `GET /.svc/witness/checkpoint?origin=…` (the held
 * checkpoint, cosigned now). Other paths go on.
 */
import {
  ADD_CHECKPOINT_PATH,
  MAX_ADD_CHECKPOINT_BYTES,
  parseAddCheckpoint,
} from "../../lib/notary-objects/add-checkpoint.ts";
import { readBody } from "../http/full/body.ts";
import { type Middleware, type ProxyResponse, proxyResponse } from "../http/types.ts";
import type { MiddlewareContext } from "./context.ts";

const CHECKPOINT = "/.svc/witness/checkpoint";

export function witness(ctx: MiddlewareContext): Middleware {
  return async (req, next) => {
    const [path, query] = splitPath(req.path);
    if (path !== ADD_CHECKPOINT_PATH && path !== CHECKPOINT) return next(req);
    const w = ctx.witness;
    if (!w) return proxyResponse(503, "witness: this proxy is not a witness (the witness section)");
    const method = path === CHECKPOINT ? "GET" : "POST";
    if (req.method !== method && !(method === "GET" && req.method === "HEAD")) {
      const r = proxyResponse(405, `witness: ${req.method} is not allowed; use ${method}`);
      r.headers.allow = method === "GET" ? "GET, HEAD" : "POST";
      return r;
    }
    if (path === CHECKPOINT) {
      const origins = new URLSearchParams(query).getAll("origin");
      if (origins.length !== 1 || !origins[0])
        return proxyResponse(
          400,
          "witness: give one origin (?origin=<the notary's SPIFFE ID without spiffe://>)",
        );
      const held = await w.cosigned(origins[0]);
      if (!held) return proxyResponse(404, `witness: no checkpoint held for ${origins[0]}`);
      return {
        status: 200,
        headers: {
          "content-type": "text/plain; charset=utf-8",
          "cache-control": "no-store",
          "svc-tree-head": held.treeHead,
          "svc-cosignature": held.cosignature,
          ...(held.refused ? { "svc-witness-refused": held.refused } : {}),
        },
        body: held.cosigned,
      };
    }
    if (!req.peer)
      return proxyResponse(
        403,
        "witness: a checkpoint is pushed over SPIFFE mTLS (a server or central listener): the pusher must be the log",
      );
    const treeHead = req.headers["svc-tree-head"];
    if (typeof treeHead !== "string" || !treeHead)
      return proxyResponse(400, "witness: Svc-Tree-Head is required: the JWS tree head of the checkpoint");
    const bytes = await readBody(req.body, MAX_ADD_CHECKPOINT_BYTES);
    if (!bytes) return proxyResponse(413, `witness: the request is over ${MAX_ADD_CHECKPOINT_BYTES} bytes`);
    let sent: ReturnType<typeof parseAddCheckpoint>;
    try {
      sent = parseAddCheckpoint(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    } catch (e) {
      return proxyResponse(
        400,
        `witness: ${e instanceof TypeError ? "the request is not UTF-8" : (e as Error).message}`,
      );
    }
    const out = await w.add(sent, treeHead, req.peer.uri);
    const res: ProxyResponse = {
      status: out.status,
      headers: { "content-type": out.contentType, "cache-control": "no-store" },
      body: out.status === 200 || out.status === 409 ? out.body : `svc-proxy: witness: ${out.body}`,
    };
    if (out.cosignature) res.headers["svc-cosignature"] = out.cosignature;
    return res;
  };
}

function splitPath(p: string): [string, string] {
  const q = p.indexOf("?");
  return q < 0 ? [p, ""] : [p.slice(0, q), p.slice(q + 1)];
}
