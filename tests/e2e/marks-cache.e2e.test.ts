import { afterAll, beforeAll, expect, test } from "bun:test";
import { openKubeClient } from "../../lib/kube/client.ts";
import { MarksCache } from "../../lib/kube/marks-cache.ts";
import { waitUntil } from "../support/wait.ts";
import { useTestbed } from "./support.ts";
import { kubectlAs } from "./testbed/index.ts";

/**
 * The admission webhook's pod cache against the test bed's kube-apiserver: filled by a list, then kept
 * current by the watch (additions, relabels, deletions), through @kubernetes/client-node over Bun's fetch.
 */
const testbed = useTestbed();
let cache: MarksCache;
let secrets: MarksCache;
const errors: string[] = [];

beforeAll(async () => {
  const client = openKubeClient(testbed().kube.kubeconfig);
  const events = { synced: () => {}, error: (_kind: string, m: string) => errors.push(m) };
  cache = new MarksCache(client, "pods", events);
  secrets = new MarksCache(client, "secrets", events);
  cache.start();
  secrets.start();
  await Promise.all([cache.whenReady(), secrets.whenReady()]);
});
afterAll(() => {
  cache.stop();
  secrets.stop();
  // A test bed this file started itself may already be stopped (its hook runs first): nothing to clean.
  try {
    kubectlAs(
      testbed(),
      "admin",
    )(["-n", "alpha", "delete", "pod,secret", "pc-0", "--ignore-not-found", "--wait=false"]);
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

test("a Secret's marks are cached from its metadata alone", async () => {
  const admin = kubectlAs(testbed(), "admin");
  admin(
    ["apply", "-f", "-"],
    JSON.stringify({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "pc-0", namespace: "alpha", labels: { "svc.io/compartment": "US-TS-ALPHA" } },
      stringData: { password: "not for the webhook" },
    }),
  );
  await waitUntil(
    "the secret in the cache",
    () => secrets.get("alpha", "pc-0")?.compartment === "US-TS-ALPHA",
  );
  // What is kept is the UID and the marks; the entry holds nothing of the data.
  expect(JSON.stringify(secrets.get("alpha", "pc-0"))).not.toContain("not for the webhook");
  expect(Object.keys(secrets.get("alpha", "pc-0") ?? {}).sort()).toEqual([
    "compartment",
    "compartmentNote",
    "level",
    "uid",
  ]);
  expect(errors).toEqual([]);
});
