import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import { type GlobalFlags, resolveKubeconfig } from "../../lib/kube/kubeconfig.ts";
import { tempDir } from "../support/dev-api.ts";

/** The cluster target kubectl would use, resolved without kubectl, or "unsupported" (then svc asks kubectl). */
const dir = tempDir("svc-kubeconfig-");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const write = (name: string, doc: object) => {
  const path = join(dir, name);
  writeFileSync(path, stringify(doc));
  return path;
};
const a = write("a.yaml", {
  "current-context": "alice",
  clusters: [{ name: "c", cluster: { server: "https://a.example:6443", "certificate-authority": "ca.pem" } }],
  users: [
    { name: "alice", user: { token: "alice-token" } },
    { name: "plugin", user: { exec: { command: "x" } } },
  ],
  contexts: [
    { name: "alice", context: { cluster: "c", user: "alice", namespace: "alpha" } },
    { name: "plugin", context: { cluster: "c", user: "plugin" } },
  ],
});
writeFileSync(join(dir, "ca.pem"), "CA FROM A");
mkdirSync(join(dir, "sub"), { recursive: true });
const b = write("sub/b.yaml", {
  "current-context": "bob",
  clusters: [
    { name: "c", cluster: { server: "https://shadowed.example" } },
    { name: "d", cluster: { server: "https://b.example" } },
  ],
  users: [{ name: "bob", user: { tokenFile: "token" } }],
  contexts: [{ name: "bob", context: { cluster: "d", user: "bob" } }],
});
writeFileSync(join(dir, "sub", "token"), "bob-token\n");

const flags = (o: Record<string, string | string[]>): GlobalFlags =>
  new Map(Object.entries(o).map(([k, v]) => [k, Array.isArray(v) ? v : [v]]));
const ok = (f: GlobalFlags, env: Record<string, string> = {}) => {
  const r = resolveKubeconfig(f, { HOME: dir, ...env }, dir);
  if (!("ok" in r)) throw new Error(r.unsupported);
  return r.ok;
};
const unsupported = (f: GlobalFlags, env: Record<string, string | undefined> = {}) => {
  const r = resolveKubeconfig(f, { HOME: dir, ...env }, dir);
  return "unsupported" in r ? r.unsupported : undefined;
};

describe("the cluster target, as kubectl resolves it", () => {
  test("a KUBECONFIG list is merged: the first file to name a cluster or the current context wins", () => {
    const t = ok(flags({}), { KUBECONFIG: `${a}:${b}` });
    expect(t).toMatchObject({ server: "https://a.example:6443", token: "alice-token", namespace: "alpha" });
    expect(t.ca).toBe("CA FROM A");
    const bob = ok(flags({ context: "bob" }), { KUBECONFIG: `${b}:${a}` });
    expect(bob).toMatchObject({ server: "https://b.example", token: "bob-token", namespace: "default" });
    // In b first, cluster "c" is b's.
    expect(ok(flags({ context: "alice" }), { KUBECONFIG: `${b}:${a}` }).server).toBe(
      "https://shadowed.example",
    );
  });

  test("files missing from a KUBECONFIG list are skipped; a missing --kubeconfig is not", () => {
    expect(ok(flags({}), { KUBECONFIG: `${join(dir, "nope")}:${a}` }).token).toBe("alice-token");
    expect(unsupported(flags({ kubeconfig: join(dir, "nope") }))).toContain("does not exist");
  });

  test("--kubeconfig wins over KUBECONFIG; relative paths are relative to the file that names them", () => {
    expect(ok(flags({ kubeconfig: b }), { KUBECONFIG: a }).token).toBe("bob-token");
  });

  test("flags override the kubeconfig: context, cluster, user, server, token, namespace, impersonation", () => {
    const t = ok(
      flags({
        context: "alice",
        cluster: "d",
        user: "bob",
        namespace: "n",
        as: "carol",
        "as-group": ["g1"],
      }),
      { KUBECONFIG: `${a}:${b}` },
    );
    expect(t).toMatchObject({ server: "https://b.example", token: "bob-token", namespace: "n" });
    expect(t.impersonate).toEqual({ user: "carol", groups: ["g1"] });
    expect(ok(flags({ server: "https://s.example", token: "t" }), { KUBECONFIG: a })).toMatchObject({
      server: "https://s.example",
      token: "t",
      ca: "CA FROM A",
    });
  });

  test("what svc does not reproduce exactly is left to kubectl", () => {
    expect(unsupported(flags({ context: "plugin" }), { KUBECONFIG: a })).toBe("the user field exec");
    expect(unsupported(flags({ username: "u" }), { KUBECONFIG: a })).toBe("the flag --username");
    expect(unsupported(flags({ "insecure-skip-tls-verify": "true" }), { KUBECONFIG: a })).toContain(
      "insecure-skip-tls-verify",
    );
    expect(unsupported(flags({ "as-group": "g" }), { KUBECONFIG: a })).toBe("impersonation without --as");
    // Bun's fetch would send the groups as one "g1, g2" header, one group to the API server.
    expect(unsupported(flags({ as: "carol", "as-group": ["g1", "g2"] }), { KUBECONFIG: a })).toBe(
      "more than one impersonated group",
    );
    expect(unsupported(flags({ context: "toString" }), { KUBECONFIG: a })).toBe("context toString not found");
    expect(unsupported(flags({ context: "__proto__" }), { KUBECONFIG: a })).toBe(
      "context __proto__ not found",
    );
    expect(unsupported(flags({}), { KUBECONFIG: a, HOME: undefined })).toBe("HOME is not set");
    expect(unsupported(flags({}), { KUBECONFIG: a, POD_NAMESPACE: "x" })).toBe("in-cluster configuration");
    writeFileSync(
      join(dir, "merge.yaml"),
      "clusters:\n- name: c\n  cluster: {server: 'https://a', <<: {server: 'https://b'}}\n",
    );
    expect(unsupported(flags({}), { KUBECONFIG: join(dir, "merge.yaml") })).toContain(
      "merge keys, anchors or tags",
    );
    writeFileSync(join(dir, "broken.yaml"), "clusters: {");
    expect(unsupported(flags({}), { KUBECONFIG: join(dir, "broken.yaml") })).toContain(
      "cannot read kubeconfig",
    );
  });
});
