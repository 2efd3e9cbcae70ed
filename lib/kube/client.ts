/**
 * The proxy's Kubernetes client (the notary and the admission webhook): @kubernetes/client-node loads the
 * kubeconfig or the in-cluster service account (re-reading a rotated token file at least once a minute,
 * as client-go does), supplies exec and OIDC credentials, and generates the typed API calls. Its own
 * transport hands TLS settings to undici through a `dispatcher`, which Bun's fetch ignores (every request
 * then fails certificate verification), so requests go through Bun's fetch here with the same settings.
 * Only proxy processes with a notary or an admission block import this module (docs/admission.md has the
 * start-up and memory figures).
 */
import type { RequestOptions } from "node:https";
import {
  AuthorizationV1Api,
  CoreV1Api,
  createConfiguration,
  KubeConfig,
  type RequestContext,
  ResponseContext,
  ServerConfiguration,
  wrapHttpLibrary,
} from "@kubernetes/client-node";
import { SvcError } from "../errors.ts";

export interface KubeClient {
  server: string;
  /** Where the credentials came from, for messages. */
  from: string;
  core: CoreV1Api;
  authorization: AuthorizationV1Api;
  /** The same client (credentials loaded once) with another deadline for typed calls. */
  withTimeout(timeoutMs: number): KubeClient;
  /** A raw request to the API server with the client's credentials (for watches). */
  fetch(
    path: string,
    init?: { signal?: AbortSignal; method?: string; body?: string; headers?: Record<string, string> },
  ): Promise<Response>;
}

/**
 * Loads credentials the way client-go does: `kubeconfig` (or KUBECONFIG, ~/.kube/config), else in-cluster.
 * `timeoutMs` bounds each typed call (watches are bounded by their caller).
 */
export function openKubeClient(kubeconfig?: string, timeoutMs = 10_000): KubeClient {
  const kc = new KubeConfig();
  let from: string;
  try {
    if (kubeconfig) {
      kc.loadFromFile(kubeconfig);
      from = `kubeconfig ${kubeconfig}`;
    } else {
      kc.loadFromDefault();
      from = kc.getCurrentCluster()?.name === "inCluster" ? "in-cluster service account" : "kubeconfig";
    }
  } catch (e) {
    throw new SvcError("kube_api", `cannot load cluster credentials: ${(e as Error).message}`);
  }
  const cluster = kc.getCurrentCluster();
  // With nothing to load, client-node falls back to http://localhost:8080 unauthenticated: refuse instead.
  const fallback = !kubeconfig && cluster?.name === "cluster" && cluster.server === "http://localhost:8080";
  if (!cluster?.server || fallback)
    throw new SvcError(
      "kube_api",
      "no usable cluster credentials: not running in a pod, and no kubeconfig with a current context (set KUBECONFIG)",
    );
  const server = cluster.server.replace(/\/+$/, "");
  // client-node refuses plain HTTP on every request unless the cluster says so; say it once, at start.
  if (/^http:\/\//i.test(server) && !cluster.skipTLSVerify)
    throw new SvcError(
      "kube_api",
      `cluster API ${server} (${from}) is plain HTTP, which sends credentials unencrypted: use https, or set insecure-skip-tls-verify: true on the kubeconfig's cluster to accept it`,
    );

  const send = async (
    url: string,
    init: { method: string; headers?: Record<string, string>; body?: string; signal?: AbortSignal },
  ) => {
    const opts: RequestOptions = { headers: {} };
    // Exec and OIDC plugins run here, and can fail.
    await kc.applyToHTTPSOptions(opts).catch((e: Error) => {
      throw new SvcError(
        "kube_api",
        `cannot get credentials for cluster API ${server} (${from}): ${e.message}`,
      );
    });
    const headers = { ...(opts.headers as Record<string, string>), ...init.headers };
    try {
      return await fetch(url, {
        method: init.method,
        headers,
        ...(init.body !== undefined ? { body: init.body } : {}),
        ...(init.signal ? { signal: init.signal } : {}),
        tls: {
          ...(opts.ca ? { ca: opts.ca as string } : {}),
          ...(opts.cert ? { cert: opts.cert as string } : {}),
          ...(opts.key ? { key: opts.key as string } : {}),
          rejectUnauthorized: opts.rejectUnauthorized !== false,
        },
      });
    } catch (e) {
      if ((e as Error).name === "AbortError" || (e as Error).name === "TimeoutError") throw e;
      throw new SvcError("kube_api", `cluster API ${server} unreachable (${from}): ${(e as Error).message}`);
    }
  };

  // The typed API for one per-call deadline; every deadline shares the credentials loaded above.
  const withTimeout = (timeoutMs: number): KubeClient => {
    const httpApi = wrapHttpLibrary({
      async send(request: RequestContext) {
        const body = request.getBody();
        const res = await send(request.getUrl(), {
          method: request.getHttpMethod().toString(),
          headers: request.getHeaders(),
          ...(typeof body === "string" ? { body } : {}),
          signal: request.getSignal() ?? AbortSignal.timeout(timeoutMs),
        });
        const headers: Record<string, string> = {};
        res.headers.forEach((value, name) => {
          headers[name] = value;
        });
        return new ResponseContext(res.status, headers, {
          text: () => res.text(),
          binary: async () => Buffer.from(await res.arrayBuffer()),
          stream: () => res.body,
        });
      },
    });
    const configuration = createConfiguration({ baseServer: new ServerConfiguration(server, {}), httpApi });
    return {
      server,
      from,
      core: new CoreV1Api(configuration),
      authorization: new AuthorizationV1Api(configuration),
      fetch: (path, init = {}) => send(`${server}${path}`, { method: init.method ?? "GET", ...init }),
      withTimeout,
    };
  };
  return withTimeout(timeoutMs);
}
