import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { findKubectl, withContext } from "../../lib/kube/kubectl.ts";
import { tempDir } from "../support/dev-api.ts";

const dir = tempDir("svc-kubectl-");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("kubectl arguments with the compartment context", () => {
  const t = { kubeContext: "prod", kubeconfig: "/k", namespace: "alpha" };
  const added = ["--context=prod", "--kubeconfig=/k", "--namespace=alpha"];
  test("context, kubeconfig and namespace are added after the command (kubectl refuses flags before a plugin)", () => {
    expect(withContext(["get", "pods"], t)).toEqual(["get", "pods", ...added]);
    expect(withContext(["myplugin", "x"], t)).toEqual(["myplugin", "x", ...added]);
  });
  test("the user's own flags win", () => {
    const own = ["get", "pods", "-n", "x", "--context=other"];
    expect(withContext(own, t)).toEqual([...own, "--kubeconfig=/k"]);
    expect(withContext(["get", "pods", "-A"], t)).toEqual([
      "get",
      "pods",
      "-A",
      "--context=prod",
      "--kubeconfig=/k",
    ]);
    expect(withContext(["get", "pods", "-nkube-system"], t)).toHaveLength(5);
  });
  test("flags after -- belong to the command run in the pod; ours go before it", () => {
    expect(withContext(["exec", "p", "--", "sh", "-n", "x"], t)).toEqual([
      "exec",
      "p",
      ...added,
      "--",
      "sh",
      "-n",
      "x",
    ]);
  });
});

describe("finding kubectl", () => {
  test("skips a kubectl that is svc itself (a symlink to this executable)", () => {
    const a = join(dir, "a");
    const b = join(dir, "b");
    mkdirSync(a);
    mkdirSync(b);
    const self = join(dir, "svc");
    writeFileSync(self, "#!/bin/sh\n");
    chmodSync(self, 0o755);
    symlinkSync(self, join(a, "kubectl"));
    writeFileSync(join(b, "kubectl"), "#!/bin/sh\n");
    chmodSync(join(b, "kubectl"), 0o755);
    expect(findKubectl({ PATH: `${a}:${b}` }, self)).toBe(join(b, "kubectl"));
    expect(() => findKubectl({ PATH: a }, self)).toThrow("kubectl not found on PATH");
    expect(findKubectl({ PATH: a, SVC_KUBECTL: join(b, "kubectl") }, self)).toBe(join(b, "kubectl"));
  });

  test("an unusable SVC_KUBECTL is a clear error, not a failed spawn", () => {
    expect(() => findKubectl({ PATH: "", SVC_KUBECTL: "/opt/nowhere/kubectl" })).toThrow(
      "SVC_KUBECTL=/opt/nowhere/kubectl: not an executable file",
    );
    expect(() => findKubectl({ PATH: dir, SVC_KUBECTL: "kubectl-typo" })).toThrow("SVC_KUBECTL=kubectl-typo");
    expect(() => findKubectl({ PATH: "", SVC_KUBECTL: dir })).toThrow("not an executable file");
  });
});
