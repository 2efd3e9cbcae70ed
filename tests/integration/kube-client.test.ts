import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openKubeClient } from "../../lib/kube/client.ts";
import { writeKubeconfig } from "../support/kubeconfig.ts";

// The proxy's Kubernetes client against a plain-HTTP API server on loopback: refused at start unless the
// kubeconfig accepts it, then served (docs/notary.md, "What the notary needs").
const dir = mkdtempSync(join(tmpdir(), "svc-kube-client-"));
const api = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch: (req) =>
    new URL(req.url).pathname === "/api/v1/namespaces/shop/pods/llm-0"
      ? Response.json({ apiVersion: "v1", kind: "Pod", metadata: { name: "llm-0", uid: "u-1" } })
      : Response.json({ kind: "Status", code: 404 }, { status: 404 }),
});
afterAll(() => {
  api.stop(true);
  rmSync(dir, { recursive: true, force: true });
});

const kubeconfig = (name: string, cluster: Record<string, unknown>) =>
  writeKubeconfig(join(dir, name), cluster);

describe("openKubeClient and a plain-HTTP API server", () => {
  test("is refused at start, naming the server and the setting that accepts it", () => {
    const path = kubeconfig("plain", { server: `http://127.0.0.1:${api.port}` });
    expect(() => openKubeClient(path)).toThrow(
      `cluster API http://127.0.0.1:${api.port} (kubeconfig ${path}) is plain HTTP, which sends credentials unencrypted: use https, or set insecure-skip-tls-verify: true on the kubeconfig's cluster to accept it`,
    );
  });

  test("is used when the kubeconfig's cluster accepts it", async () => {
    const path = kubeconfig("accepted", {
      server: `http://127.0.0.1:${api.port}`,
      "insecure-skip-tls-verify": true,
    });
    const kube = openKubeClient(path);
    const pod = await kube.core.readNamespacedPod({ namespace: "shop", name: "llm-0" });
    expect(pod.metadata?.uid).toBe("u-1");
    const missing = await kube.core.readNamespacedPod({ namespace: "shop", name: "gone" }).catch((e) => e);
    expect((missing as { code?: number }).code).toBe(404);
  });
});
