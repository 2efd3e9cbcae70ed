import { afterAll, describe, expect, test } from "bun:test";
import { appendFileSync } from "node:fs";
import { createServer } from "node:net";
import { readLine } from "../support/net.ts";
import { spawnProc, stopAll } from "../support/proc.ts";
import { useTestbed } from "./support.ts";
import { kubectlAs } from "./testbed/index.ts";

/** kubectl against the test bed's kube-apiserver and kwok, as each of its users. */
const testbed = useTestbed();
afterAll(stopAll);

function kubectlResult(user: "admin" | "alice" | "bob", args: string[]) {
  const tb = testbed();
  const r = Bun.spawnSync([
    "kubectl",
    `--kubeconfig=${tb.kube.kubeconfig}`,
    `--context=${tb.kube.users[user].context}`,
    ...args,
  ]);
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
}

describe("kubectl as each test bed user", () => {
  test.each([
    ["admin", "svc-admin", ["system:masters", "system:authenticated"]],
    [
      "alice",
      "alice",
      [
        "svc:developers",
        "svc:country:us",
        "svc:sensitivity:ts",
        "svc:compartment:alpha",
        "system:authenticated",
      ],
    ],
    [
      "bob",
      "bob",
      [
        "svc:developers",
        "svc:country:uk",
        "svc:sensitivity:s",
        "svc:compartment:bravo",
        "system:authenticated",
      ],
    ],
  ] as const)("auth whoami as %s", (user, name, groups) => {
    const review = JSON.parse(kubectlAs(testbed(), user)(["auth", "whoami", "-o", "json"]));
    expect(review.status.userInfo.username).toBe(name);
    expect(review.status.userInfo.groups).toEqual([...groups]);
  });

  test("RBAC: a developer may list pods in their compartment's namespace and not in another's", () => {
    expect(kubectlResult("alice", ["get", "pods", "-n", "alpha", "-o", "name"]).out).toContain("pod/web-0");
    const denied = kubectlResult("alice", ["get", "pods", "-n", "bravo"]);
    expect(denied.code).not.toBe(0);
    expect(denied.err).toContain(
      'User "alice" cannot list resource "pods" in API group "" in the namespace "bravo"',
    );
    expect(kubectlResult("bob", ["auth", "can-i", "create", "pods/exec", "-n", "alpha"]).out.trim()).toBe(
      "no",
    );
    expect(kubectlResult("bob", ["auth", "can-i", "create", "pods/exec", "-n", "bravo"]).out.trim()).toBe(
      "yes",
    );
  });

  test("the kwok pods run", () => {
    const phase = kubectlResult("admin", [
      "get",
      "pod",
      "web-0",
      "-n",
      "alpha",
      "-o",
      "jsonpath={.status.phase}",
    ]);
    expect(phase.out).toBe("Running");
  });

  test("exec on a kwok pod runs the command and returns its output; a failure is reported", () => {
    const exec = (user: "alice" | "bob", script: string) =>
      kubectlResult(user, ["exec", "web-0", "-n", "alpha", "--", "sh", "-c", script]);
    const ok = exec("alice", "echo hello from $0; exit 0");
    expect(ok.code).toBe(0);
    expect(ok.out).toBe("hello from sh\n");
    // kwok reports a failed command as an internal error rather than passing its exit status through.
    const failing = exec("alice", "exit 3");
    expect(failing.code).toBe(1);
    expect(failing.err).toContain(
      "error executing command in container: cmd wait: sh -c exit 3: exit status 3",
    );
    const denied = kubectlResult("bob", ["exec", "web-0", "-n", "alpha", "--", "true"]);
    expect(denied.code).not.toBe(0);
    expect(denied.err).toContain(
      'User "bob" cannot get resource "pods" in API group "" in the namespace "alpha"',
    );
  });

  test("logs of a kwok pod come from the configured log file", () => {
    const tb = testbed();
    const marker = `line-${Date.now()}`;
    appendFileSync(
      tb.kube.podLog,
      `${new Date().toISOString()} stdout F first ${marker}\n${new Date().toISOString()} stderr F second ${marker}\n`,
    );
    const r = kubectlResult("alice", ["logs", "web-0", "-n", "alpha"]);
    expect(r.code).toBe(0);
    expect(r.out).toContain(`first ${marker}\nsecond ${marker}\n`);
  });

  test("port-forward to a kwok pod reaches the configured target", async () => {
    const tb = testbed();
    const target = createServer((s) => s.end("pong\n"));
    await new Promise<void>((r) => target.listen(tb.kube.forwardPort, "127.0.0.1", () => r()));
    try {
      const pf = spawnProc([
        "kubectl",
        `--kubeconfig=${tb.kube.kubeconfig}`,
        "--context=testbed-alice",
        "port-forward",
        "-n",
        "alpha",
        "pod/web-0",
        ":8080",
      ]);
      const line = await pf.waitFor((l) => l.startsWith("Forwarding from 127.0.0.1:"), 30_000);
      const port = Number(/127\.0\.0\.1:(\d+)/.exec(line)?.[1]);
      // The forwarded stream does not pass the target's FIN back, so read one line rather than to the end.
      const got = await readLine(port);
      expect(got).toBe("pong\n");
      await pf.stop();
    } finally {
      target.close();
    }
  }, 60_000);
});
