import { afterAll, beforeAll, expect, test } from "bun:test";
import { openKubeClient } from "../../lib/kube/client.ts";
import { PodCache } from "../../lib/kube/pod-cache.ts";
import { useTestbed } from "./support.ts";
import { kubectlAs } from "./testbed/index.ts";
import { waitUntil } from "./testbed/process.ts";

/**
 * The admission webhook's pod cache against the test bed's kube-apiserver: filled by a list, then kept
 * current by the watch (additions, relabels, deletions), through @kubernetes/client-node over Bun's fetch.
 */
const testbed = useTestbed();
let cache: PodCache;
const errors: string[] = [];

beforeAll(async () => {
  const client = openKubeClient(testbed().kube.kubeconfig);
  cache = new PodCache(client, { synced: () => {}, error: (m) => errors.push(m) });
  cache.start();
  await cache.whenReady();
});
afterAll(() => {
  cache.stop();
  // A test bed this file started itself may already be stopped (its hook runs first): nothing to clean.
  try {
    kubectlAs(
      testbed(),
      "admin",
    )(["-n", "alpha", "delete", "pod", "pc-0", "--ignore-not-found", "--wait=false"]);
  } catch {}
});

test("the first list holds the pods that exist; the watch brings additions, relabels and deletions", async () => {
  const admin = kubectlAs(testbed(), "admin");
  expect(cache.ready).toBe(true);
  expect(cache.get("alpha", "web-0")).toBeDefined();
  admin(
    ["apply", "-f", "-"],
    JSON.stringify({
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "pc-0", namespace: "alpha", labels: { "svc.io/compartment": "US-TS-ALPHA" } },
      spec: { containers: [{ name: "main", image: "busybox" }] },
    }),
  );
  await waitUntil(
    "the new pod in the cache",
    () => cache.get("alpha", "pc-0")?.compartment === "US-TS-ALPHA",
  );
  const uid = admin(["-n", "alpha", "get", "pod", "pc-0", "-o", "jsonpath={.metadata.uid}"]);
  expect(cache.get("alpha", "pc-0")?.uid).toBe(uid);
  admin(["-n", "alpha", "label", "--overwrite", "pod", "pc-0", "svc.io/compartment=UK-S-BRAVO"]);
  await waitUntil("the relabel in the cache", () => cache.get("alpha", "pc-0")?.compartment === "UK-S-BRAVO");
  admin(["-n", "alpha", "label", "pod", "pc-0", "svc.io/compartment-"]);
  await waitUntil("the removed label in the cache", () => {
    const entry = cache.get("alpha", "pc-0");
    return entry !== undefined && entry.compartment === undefined;
  });
  admin(["-n", "alpha", "delete", "pod", "pc-0", "--grace-period=0", "--force"]);
  await waitUntil("the deletion in the cache", () => cache.get("alpha", "pc-0") === undefined);
  expect(errors).toEqual([]);
});
