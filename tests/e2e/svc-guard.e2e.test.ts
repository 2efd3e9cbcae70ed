import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { stringify } from "yaml";
import { compiled } from "../support/compiled.ts";
import { tempDir } from "../support/dev-api.ts";
import { ROOT, spawnProc } from "../support/proc.ts";
import { waitUntil } from "../support/wait.ts";
import {
  type AuditEvent,
  auditSince as auditEventsSince,
  auditSize as auditSizeOf,
  createContexts,
  useTestbed,
} from "./support.ts";
import { kubectlAs } from "./testbed/index.ts";
import { NODE } from "./testbed/kube.ts";

/**
 * The compartment guard against the test bed's real kube-apiserver, tried the way an attacker would: the
 * same guarded command with global flags in every position and form, value flags, other kinds that
 * select the pod, files, another context, a KUBECONFIG list. Each line aimed at a pod or object of
 * compartment BRAVO is refused before kubectl makes the request — the API server's audit log shows no
 * exec, attach, port-forward, debug or write for it — and the same line aimed at compartment ALPHA gets
 * through (the audit log shows its request).
 *
 * RBAC lets alice do all of it in namespace alpha: only svc stands in the way here (the cluster side is
 * another layer).
 */
const testbed = useTestbed();
const dir = tempDir("svc-guard-e2e-");
const config = join(dir, "config.yaml");
const ALPHA = "US-TS-ALPHA";
const BRAVO = "UK-S-BRAVO";
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function svc(args: string[], env: Record<string, string> = {}, stdin?: string) {
  const r = Bun.spawnSync([compiled("svc"), ...args], {
    cwd: ROOT,
    env: { ...process.env, SVC_CONFIG: config, KUBECONFIG: testbed().kube.kubeconfig, ...env },
    ...(stdin !== undefined ? { stdin: new TextEncoder().encode(stdin) } : {}),
  });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
}

const auditSize = () => auditSizeOf(testbed());
const auditSince = (from: number) => auditEventsSince(testbed(), from);

/** What reached the API server for an object: requests into a pod, and writes. */
const touching = (events: AuditEvent[], name: string) =>
  events.filter(
    (e) =>
      e.objectRef?.name === name &&
      (e.objectRef.subresource !== undefined || !["get", "list", "watch"].includes(e.verb)),
  );

const pod = (name: string, compartment: string, app: string) => ({
  apiVersion: "v1",
  kind: "Pod",
  metadata: { name, namespace: "alpha", labels: { app, "svc.io/compartment": compartment } },
  spec: { nodeName: NODE, containers: [{ name: "c", image: "busybox" }] },
});
const deployment = (name: string, compartment: string, app: string) => ({
  apiVersion: "apps/v1",
  kind: "Deployment",
  metadata: { name, namespace: "alpha", labels: { "svc.io/compartment": compartment } },
  spec: {
    // Pinned, as svc apply writes it and the admission policy wants it.
    selector: { matchLabels: { app, "svc.io/compartment": compartment } },
    template: {
      metadata: { labels: { app, "svc.io/compartment": compartment } },
      spec: { containers: [{ name: "c", image: "busybox" }] },
    },
  },
});
const service = (name: string, compartment: string, app: string) => ({
  apiVersion: "v1",
  kind: "Service",
  metadata: { name, namespace: "alpha", labels: { "svc.io/compartment": compartment } },
  spec: { selector: { app, "svc.io/compartment": compartment }, ports: [{ port: 8080 }] },
});
/** A config map with the marks svc apply gives an object of that compartment. */
const configMap = (name: string, compartment: string) => {
  const [country, sensitivity, c] = compartment.toLowerCase().split("-");
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: {
      name,
      namespace: "alpha",
      labels: { "svc.io/compartment": compartment },
      annotations: {
        "mls.svc.dev/level": `${country}:${sensitivity}`,
        "mls.svc.dev/compartment": `${country}:${c}`,
      },
    },
    data: { k: "v" },
  };
};

const file = (name: string, o: object) => {
  const path = join(dir, name);
  writeFileSync(path, stringify(o));
  return path;
};

let listKubeconfig = "";
let aliceToken = "";

beforeAll(() => {
  const admin = kubectlAs(testbed(), "admin");
  const objects = [
    pod("own-0", ALPHA, "own-app"),
    pod("other-0", BRAVO, "other-app"),
    deployment("own-deploy", ALPHA, "own-app"),
    deployment("other-deploy", BRAVO, "other-app"),
    service("own-svc", ALPHA, "own-app"),
    service("other-svc", BRAVO, "other-app"),
    configMap("cm-own", ALPHA),
    configMap("cm-other", BRAVO),
  ];
  // Objects the allowed lines create are removed first, so that a second run creates them again.
  admin([
    "delete",
    "configmap",
    "cm-new-own",
    "cm-new-other",
    "hidden-own",
    "--ignore-not-found",
    "-n",
    "alpha",
  ]);
  admin([
    "delete",
    "pod",
    "own-run",
    "other-run",
    "--ignore-not-found",
    "--force",
    "--grace-period=0",
    "-n",
    "alpha",
  ]);
  admin(["delete", "service", "exp-own", "exp-other", "--ignore-not-found", "-n", "alpha"]);
  admin(["apply", "-f", "-"], objects.map((o) => stringify(o)).join("---\n"));
  admin(["wait", "--for=condition=Ready", "pod/own-0", "pod/other-0", "-n", "alpha", "--timeout=60s"]);
  expect(
    createContexts(svc, [
      ["us-ts-alpha", "ALPHA", "testbed-alice", "alpha"],
      ["us-ts-alpha-admin", "ALPHA", "testbed-admin", "alpha"],
    ]),
  ).toEqual([0, 0]);
  expect(svc(["context", "use", "us-ts-alpha"]).code).toBe(0);
  // A second kubeconfig with only a context: kubectl merges a KUBECONFIG list, and so must the check.
  listKubeconfig = join(dir, "list-kubeconfig");
  writeFileSync(
    listKubeconfig,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      contexts: [{ name: "list-alice", context: { cluster: "testbed", user: "alice", namespace: "alpha" } }],
    }),
  );
  aliceToken = testbed().kube.users.alice.token;
  file("other-pod.yaml", {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: "other-0", namespace: "alpha" },
  });
  file("own-pod.yaml", { apiVersion: "v1", kind: "Pod", metadata: { name: "own-0", namespace: "alpha" } });
  file("other-cm.yaml", configMap("cm-new-other", BRAVO));
  file("own-cm.yaml", configMap("cm-new-own", ALPHA));
  file("cm-own-to-bravo.yaml", configMap("cm-own", BRAVO));
  file("cm-own-same.yaml", configMap("cm-own", ALPHA));
  file("cm-other-unlabelled.yaml", { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "cm-other" } });
  file("cm-own-unlabelled.yaml", { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "cm-own" } });
  // kubectl reads any object with `items` as a list: a decoy whose items are the real objects.
  file("decoy.yaml", {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: "decoy" },
    items: [configMap("hidden-other", BRAVO)],
  });
  file("decoy-own.yaml", {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: "decoy" },
    items: [configMap("hidden-own", ALPHA)],
  });
}, 120_000);

/**
 * [the line aimed at BRAVO (refused), the object it names, the line aimed at ALPHA (gets through), its
 * object, extra environment]. `{dir}`, `{kc}`, `{list}` and `{token}` are filled in.
 */
/** A line is split at spaces, or given as its words where a word holds a space. */
type Line = string | string[];
type Row = [Line, string, Line, string, Record<string, string>?];
const ROWS: Row[] = [
  ["exec other-0 -- true", "other-0", "exec own-0 -- true", "own-0"],
  ["-n alpha exec other-0 -- true", "other-0", "-n alpha exec own-0 -- true", "own-0"],
  ["--namespace=alpha exec other-0 -- true", "other-0", "--namespace=alpha exec own-0 -- true", "own-0"],
  ["-nalpha exec other-0 -- true", "other-0", "-nalpha exec own-0 -- true", "own-0"],
  ["exec other-0 -n alpha -- true", "other-0", "exec own-0 -n alpha -- true", "own-0"],
  [
    "--context testbed-alice exec other-0 -- true",
    "other-0",
    "--context testbed-alice exec own-0 -- true",
    "own-0",
  ],
  [
    "--context=testbed-admin exec other-0 -- true",
    "other-0",
    "--context=testbed-admin exec own-0 -- true",
    "own-0",
  ],
  ["--kubeconfig {kc} exec other-0 -- true", "other-0", "--kubeconfig {kc} exec own-0 -- true", "own-0"],
  [
    "exec --cache-dir {dir}/cache other-0 -- true",
    "other-0",
    "exec --cache-dir {dir}/cache own-0 -- true",
    "own-0",
  ],
  ["exec -c c other-0 -- true", "other-0", "exec -c c own-0 -- true", "own-0"],
  ["exec -i other-0 -- true", "other-0", "exec -i own-0 -- true", "own-0"],
  [
    "exec --pod-running-timeout=30s other-0 -- true",
    "other-0",
    "exec --pod-running-timeout=30s own-0 -- true",
    "own-0",
  ],
  [
    "exec --request-timeout 30s other-0 -- true",
    "other-0",
    "exec --request-timeout 30s own-0 -- true",
    "own-0",
  ],
  ["-v 0 exec other-0 -- true", "other-0", "-v 0 exec own-0 -- true", "own-0"],
  ["exec pod/other-0 -- true", "other-0", "exec pod/own-0 -- true", "own-0"],
  ["exec pods/other-0 -- true", "other-0", "exec pods/own-0 -- true", "own-0"],
  ["exec po/other-0 -- true", "other-0", "exec po/own-0 -- true", "own-0"],
  ["exec Pod/other-0 -- true", "other-0", "exec Pod/own-0 -- true", "own-0"],
  ["exec pods./other-0 -- true", "other-0", "exec pods./own-0 -- true", "own-0"],
  ["exec deploy/other-deploy -- true", "other-0", "exec deploy/own-deploy -- true", "own-0"],
  [
    "exec deployments.apps/other-deploy -- true",
    "other-0",
    "exec deployments.apps/own-deploy -- true",
    "own-0",
  ],
  ["exec svc/other-svc -- true", "other-0", "exec svc/own-svc -- true", "own-0"],
  ["exec -f {dir}/other-pod.yaml -- true", "other-0", "exec -f {dir}/own-pod.yaml -- true", "own-0"],
  [
    "--context=testbed-admin --as=alice --as-group=svc:country:us --as-group=svc:sensitivity:ts --as-group=svc:compartment:alpha exec other-0 -- true",
    "other-0",
    "--context=testbed-admin --as=alice --as-group=svc:country:us --as-group=svc:sensitivity:ts --as-group=svc:compartment:alpha exec own-0 -- true",
    "own-0",
  ],
  [
    "--context=testbed-admin --token={token} exec other-0 -- true",
    "other-0",
    "--context=testbed-admin --token={token} exec own-0 -- true",
    "own-0",
  ],
  [
    "--context list-alice exec other-0 -- true",
    "other-0",
    "--context list-alice exec own-0 -- true",
    "own-0",
    { KUBECONFIG: "{list}:{kc}" },
  ],
  ["exec --force=false other-0 -- true", "other-0", "exec --force=false own-0 -- true", "own-0"],
  ["attach other-0", "other-0", "attach own-0", "own-0"],
  ["-n alpha attach pod/other-0 -c c", "other-0", "-n alpha attach pod/own-0 -c c", "own-0"],
  ["cp other-0:/etc/hostname {dir}/x", "other-0", "cp own-0:/etc/hostname {dir}/x", "own-0"],
  ["cp {dir}/other-pod.yaml other-0:{dir}/y", "other-0", "cp {dir}/own-pod.yaml own-0:{dir}/y", "own-0"],
  ["cp alpha/other-0:/etc/hostname {dir}/x", "other-0", "cp alpha/own-0:/etc/hostname {dir}/x", "own-0"],
  ["cp -c c other-0:/etc/hostname {dir}/x", "other-0", "cp -c c own-0:/etc/hostname {dir}/x", "own-0"],
  ["debug other-0 --image=busybox", "other-0", "debug own-0 --image=busybox", "own-0"],
  [
    "--context=testbed-admin debug pod/other-0 --image=busybox",
    "other-0",
    "--context=testbed-admin debug pod/own-0 --image=busybox",
    "own-0",
  ],
  [
    "debug -f {dir}/other-pod.yaml --image=busybox",
    "other-0",
    "debug -f {dir}/own-pod.yaml --image=busybox",
    "own-0",
  ],
  ["port-forward other-0 :8080", "other-0", "port-forward own-0 :8080", "own-0"],
  ["port-forward svc/other-svc :8080", "other-0", "port-forward svc/own-svc :8080", "own-0"],
  ["port-forward deploy/other-deploy :8080", "other-0", "port-forward deploy/own-deploy :8080", "own-0"],
  ["-n alpha port-forward pod/other-0 :8080", "other-0", "-n alpha port-forward pod/own-0 :8080", "own-0"],
  [
    "label pod other-0 svc.io/compartment=US-TS-ALPHA --overwrite",
    "other-0",
    "label pod own-0 tier=a --overwrite",
    "own-0",
  ],
  [
    "label configmap cm-own svc.io/compartment=UK-S-BRAVO --overwrite",
    "cm-own",
    "label configmap cm-own tier=b --overwrite",
    "cm-own",
  ],
  ["-n alpha label cm cm-own svc.io/compartment-", "cm-own", "-n alpha label cm cm-own tier-", "cm-own"],
  [
    "annotate configmap cm-own mls.svc.dev/compartment=uk:bravo --overwrite",
    "cm-own",
    "annotate configmap cm-own note=x --overwrite",
    "cm-own",
  ],
  [
    'patch configmap cm-own -p {"metadata":{"labels":{"svc.io/compartment":"UK-S-BRAVO"}}}',
    "cm-own",
    'patch configmap cm-own -p {"metadata":{"labels":{"tier":"c"}}}',
    "cm-own",
  ],
  [
    'patch configmap cm-own --type=json -p [{"op":"remove","path":"/metadata/labels"}]',
    "cm-own",
    'patch configmap cm-own --type=json -p [{"op":"add","path":"/metadata/labels/tier","value":"d"}]',
    "cm-own",
  ],
  ["create -f {dir}/other-cm.yaml", "cm-new-other", "create -f {dir}/own-cm.yaml", "cm-new-own"],
  ["apply -f {dir}/other-cm.yaml", "cm-new-other", "apply -f {dir}/own-cm.yaml", "cm-new-own"],
  ["apply -f {dir}/cm-other-unlabelled.yaml", "cm-other", "apply -f {dir}/cm-own-unlabelled.yaml", "cm-own"],
  ["replace -f {dir}/cm-own-to-bravo.yaml", "cm-own", "replace -f {dir}/cm-own-same.yaml", "cm-own"],
  [
    "run other-run --image=busybox --labels=svc.io/compartment=UK-S-BRAVO",
    "other-run",
    "run own-run --image=busybox --labels=svc.io/compartment=US-TS-ALPHA",
    "own-run",
  ],
  [
    'patch configmap cm-own --type=JSON -p [{"op":"remove","path":"/metadata/labels"}]',
    "cm-own",
    'patch configmap cm-own --type=JSON -p [{"op":"add","path":"/metadata/labels/tier","value":"f"}]',
    "cm-own",
  ],
  ["create -f {dir}/decoy.yaml", "hidden-other", "create -f {dir}/decoy-own.yaml", "hidden-own"],
  [
    "expose deploy/other-deploy --port=80 --name=exp-other",
    "exp-other",
    "expose deploy/own-deploy --port=80 --name=exp-own",
    "exp-own",
  ],
];

const fill = (s: string) =>
  s
    .replaceAll("{dir}", dir)
    .replaceAll("{kc}", testbed().kube.kubeconfig)
    .replaceAll("{list}", listKubeconfig)
    .replaceAll("{token}", aliceToken);
const words = (line: Line) => (typeof line === "string" ? line.split(" ") : line).map(fill);
const envOf = (env: Record<string, string> = {}) =>
  Object.fromEntries(Object.entries(env).map(([k, v]) => [k, fill(v)]));

/**
 * Runs an allowed line. One that lasts runs until its request reaches the API server (the audit log
 * shows it), then is stopped
 * if it is still running: port-forward and attach do not end, and kwok's exec does not pass on the end of
 * standard input (cp into a pod). Other lines run to their end. Returns the requests seen and the exit
 * status of a line that ended.
 */
async function runAllowed(line: Line, object: string, env: Record<string, string>) {
  const from = auditSize();
  const p = spawnProc([compiled("svc"), ...words(line)], {
    SVC_CONFIG: config,
    KUBECONFIG: testbed().kube.kubeconfig,
    ...env,
  });
  const text = words(line).join(" ");
  const lasts = /port-forward|attach/.test(text) || /^cp \S+ \S+:/.test(text);
  let status: number | undefined;
  // A line that lasts is waited for until its request is in the audit log; the assertion below says
  // what happened if it never is.
  if (lasts)
    await waitUntil(text, () => touching(auditSince(from), object).length > 0, 30_000).catch(() => {});
  else status = await p.exited;
  await p.stop();
  return { reached: touching(auditSince(from), object), status, stderr: p.stderr() };
}

describe("every way past the guard is refused before the request; the same line in the own compartment gets through", () => {
  // Every row has its environment, so that bun does not take the last parameter for a done callback.
  test.each(ROWS.map(([a, b, c, d, env]) => [a, b, c, d, env ?? {}] as const))(
    "%s",
    async (refused, foreignObject, allowed, ownObject, env) => {
      expect(ROWS.length).toBeGreaterThanOrEqual(40);
      const from = auditSize();
      const r = svc(words(refused), envOf(env));
      expect(r.code).toBe(1);
      expect(r.err).toMatch(
        /Cannot execute in pod\/other-0 of compartment UK-S-BRAVO|Cannot change the compartment|Cannot (apply|create|replace|expose) across compartments|--labels svc\.io\/compartment=UK-S-BRAVO|Cannot read config map in another compartment \(UK-S-BRAVO\) \(the cluster refused svc's read\)/,
      );
      expect(r.err).toContain(`current compartment: ${ALPHA}`);
      expect(touching(auditSince(from), foreignObject)).toEqual([]);

      const { reached, status, stderr } = await runAllowed(allowed, ownObject, envOf(env));
      expect(`${allowed}: ${reached.length} requests; ${stderr}`).not.toContain(": 0 requests");
      // attach reaches kwok, which has no attach for these pods: the request arrived, kubectl then failed.
      if (status !== undefined && !allowed.includes("attach"))
        expect(`${allowed}: exit ${status}; ${stderr}`).toBe(`${allowed}: exit 0; ${stderr}`);
    },
    60_000,
  );
});

describe("the audit log an auditor can trust", () => {
  test("refusals, usage errors, forced overrides and context switches are told apart", () => {
    const log = join(dir, "audit.log");
    const text = readFileSync(config, "utf8");
    writeFileSync(config, `${text}auditLog: {enabled: true, path: ${log}, level: debug}\n`);
    try {
      svc(["exec", "--force=true", "other-0", "--", "true"]); // refused: alice may not override
      svc(["exec", "own-0", "--", "true", "--force"]); // --force after -- is the command's
      svc(["exec", "--bogus", "own-0", "--", "true"]); // a usage error
      svc(["context", "use", "us-ts-alpha-admin"]);
      svc(["exec", "--force", "other-0", "--", "true"]); // forced: the admin may
      svc(["context", "use", "us-ts-alpha"]);
      const entries = readFileSync(log, "utf8")
        .trimEnd()
        .split("\n")
        .map(
          (l) => JSON.parse(l) as { decision: string; targets: string[]; user: string; command: string[] },
        );
      expect(entries.map((e) => [e.command[1], e.decision])).toEqual([
        ["exec", "refused"],
        ["exec", "allowed"],
        ["exec", "error"],
        ["context", "allowed"],
        ["exec", "forced"],
        ["context", "allowed"],
      ]);
      expect(entries[0]?.targets).toEqual(["pod/alpha/other-0"]);
      expect(entries[1]?.targets).toEqual(["pod/alpha/own-0"]);
      const noUser = Bun.spawnSync([compiled("svc"), "exec", "own-0", "--", "true"], {
        cwd: ROOT,
        env: {
          PATH: process.env.PATH ?? "",
          HOME: process.env.HOME ?? "",
          SVC_CONFIG: config,
          KUBECONFIG: testbed().kube.kubeconfig,
        },
      });
      expect(noUser.exitCode).toBe(0);
      const last = JSON.parse(readFileSync(log, "utf8").trimEnd().split("\n").at(-1) as string);
      expect(last.user).not.toBe("");
    } finally {
      writeFileSync(config, text);
    }
  });
});

describe("random permutations of global flags around a guarded command never get past the guard", () => {
  // Flag groups placed anywhere before `--`, in any order; at most one context choice.
  const contexts = [
    [],
    ["--context", "testbed-alice"],
    ["--context=testbed-admin"],
    [
      "--context=testbed-admin",
      "--as=alice",
      "--as-group=svc:country:us",
      "--as-group=svc:sensitivity:ts",
      "--as-group=svc:compartment:alpha",
    ],
  ];
  const others = [
    ["-n", "alpha"],
    ["--namespace=alpha"],
    ["-nalpha"],
    ["--kubeconfig", "{kc}"],
    ["--request-timeout", "30s"],
    ["-v", "0"],
    ["--cache-dir={dir}/cache2"],
    ["--insecure-skip-tls-verify=false"],
  ];
  const exec = [["-c", "c"], ["-i"], ["--pod-running-timeout=30s"]];
  const locals = new Set(exec);
  test("exec: 25 random lines, each refused for BRAVO's pod and run for ALPHA's", () => {
    const from = auditSize();
    fc.assert(
      fc.property(
        fc.constantFrom(...contexts),
        fc.subarray([...others, ...exec]),
        fc.array(fc.nat(), { minLength: 12, maxLength: 12 }),
        (context, chosen, positions) => {
          // Flag groups stay whole; exec's own flags (-c, -i, --pod-running-timeout) only after it.
          const line = (target: string) => {
            const units = [["exec"], [target]];
            [context, ...chosen].forEach((group, i) => {
              const min = locals.has(group) ? units.findIndex((u) => u[0] === "exec") + 1 : 0;
              units.splice(min + ((positions[i] ?? 0) % (units.length + 1 - min)), 0, group.map(fill));
            });
            return [...units.flat(), "--", "true"];
          };
          const bad = svc(line("other-0"));
          expect(`${line("other-0").join(" ")}: ${bad.code} ${bad.err}`).toContain(
            "Cannot execute in pod/other-0 of compartment UK-S-BRAVO",
          );
          const good = svc(line("own-0"));
          expect(`${line("own-0").join(" ")}: ${good.code} ${good.err}`).toStartWith(
            `${line("own-0").join(" ")}: 0`,
          );
        },
      ),
      { numRuns: 25, seed: 13 },
    );
    expect(touching(auditSince(from), "other-0")).toEqual([]);
    expect(touching(auditSince(from), "own-0").length).toBeGreaterThanOrEqual(25);
  }, 240_000);
});

describe("edit: what the editor changes is checked", () => {
  const editor = (name: string, script: string) => {
    const path = join(dir, name);
    writeFileSync(path, `#!/bin/sh\n${script}\n`, { mode: 0o755 });
    return path;
  };
  test("a changed compartment label is refused and nothing is saved; another change is saved", () => {
    const relabel = editor("relabel.sh", `sed -i 's/US-TS-ALPHA/UK-S-BRAVO/' "$1"`);
    const from = auditSize();
    const refused = svc(["edit", "configmap", "cm-own"], { KUBE_EDITOR: relabel });
    expect(refused.code).not.toBe(0);
    expect(refused.err).toContain("Cannot change the compartment of an object with svc edit");
    expect(touching(auditSince(from), "cm-own")).toEqual([]);
    // An alias bomb or anything else svc cannot read is refused too (fail closed), and so is a second
    // round's change after kubectl re-opens the editor.
    const unreadable = editor("unreadable.sh", `printf 'a: [\\n' >> "$1"`);
    expect(svc(["edit", "configmap", "cm-own"], { KUBE_EDITOR: unreadable }).err).toContain(
      "svc cannot read what was edited",
    );
    const data = editor("data.sh", `sed -i 's/^  k: .*/  k: edited/' "$1"`);
    const saved = svc(["edit", "configmap", "cm-own"], { KUBE_EDITOR: data });
    expect(`${saved.code} ${saved.err}`).toBe(`0 ${saved.err}`);
    expect(touching(auditSince(from), "cm-own").map((e) => e.verb)).toEqual(["patch"]);
  });

  test("a process the editor leaves behind cannot change what kubectl saves after svc's check", () => {
    const [go, done] = ["edit-go", "edit-done"].map((name) => {
      const path = join(dir, name);
      expect(Bun.spawnSync(["mkfifo", path]).exitCode).toBe(0);
      return path;
    }) as [string, string];
    const seen = join(dir, "edit-seen");
    // An acceptable change, then a process left behind that relabels the file it was given once the test
    // says so.
    const lingering = editor(
      "lingering.sh",
      [
        `printf '%s\\n' "$1" > '${seen}'`,
        `sed -i 's/^  k: .*/  k: lingering/' "$1"`,
        `( read x < '${go}'; sed -i 's/US-TS-ALPHA/UK-S-BRAVO/' "$1"; echo "rewrote $?" > '${done}' ) </dev/null >/dev/null 2>&1 &`,
      ].join("\n"),
    );
    const from = auditSize();
    const r = svc(["edit", "configmap", "cm-own"], { KUBE_EDITOR: lingering });
    const late = Bun.spawnSync(["sh", "-c", 'echo go > "$1" && cat "$2"', "sh", go, done], {
      timeout: 30_000,
    });
    expect(`${r.code} ${r.err}`).toBe(`0 ${r.err}`);
    expect(late.stdout.toString()).toStartWith("rewrote");
    // The editor worked on svc's private copy, never on kubectl's file; kubectl saved what svc checked.
    const given = readFileSync(seen, "utf8").trim();
    expect(given).not.toContain("kubectl-edit-");
    expect(given).toEndWith(".yaml");
    const live = JSON.parse(svc(["get", "configmap", "cm-own", "-o", "json"]).out);
    expect(live.data.k).toBe("lingering");
    expect(live.metadata.labels["svc.io/compartment"]).toBe(ALPHA);
    expect(touching(auditSince(from), "cm-own").map((e) => e.verb)).toEqual(["patch"]);
  });

  test("SHELL cannot route around the editor step (kubectl runs it without a shell)", () => {
    const fakeShell = editor("shell.sh", "exit 0");
    const relabel = editor("relabel2.sh", `sed -i 's/US-TS-ALPHA/UK-S-BRAVO/' "$1"`);
    const r = svc(["edit", "configmap", "cm-own"], { KUBE_EDITOR: relabel, SHELL: fakeShell });
    expect(r.err).toContain("Cannot change the compartment");
  });
});

describe("what svc cannot tell is refused, never guessed", () => {
  test.each([
    [
      "create --raw /api/v1/namespaces/alpha/configmaps -f {dir}/own-cm.yaml",
      "--raw sends the file to a URL",
    ],
    ["exec -it", "a pod (NAME or TYPE/NAME) or -f FILE is required"],
    ["exec -f - -- true", "cannot read the pod from standard input"],
    [
      [
        "patch",
        "configmap",
        "cm-own",
        "-p",
        "{metadata: {annotations: &m {svc.io/compartment: UK-S-BRAVO}, labels: {<<: *m}}}",
      ],
      "svc does not accept YAML merge keys",
    ],
    ["label --overwrite configmap cm-own -- svc.io/compartment=UK-S-BRAVO", "Cannot change the compartment"],
    ["cp -- other-0:/etc/hostname {dir}/x", "Cannot execute in pod/other-0 of compartment UK-S-BRAVO"],
    ["attach pod other-0", "Cannot execute in pod/other-0 of compartment UK-S-BRAVO"],
    [
      "debug own-0 -f {dir}/other-pod.yaml --image=busybox",
      "Cannot execute in pod/other-0 of compartment UK-S-BRAVO",
    ],
    ["get --raw /api/v1/namespaces/alpha/pods/other-0/proxy/", "--raw"],
    ["get --raw /api/v1/namespaces/alpha/pods/other-0/%70roxy/", "into pods, services or nodes"],
    ["get --raw /api/v1/namespaces/alpha/pods/other-0%2Fproxy/", "into pods, services or nodes"],
    ["get --raw /api/v1/namespaces/alpha/pods/other-0/x/../proxy/", "a . or .. segment"],
    ["get --raw /api/v1/namespaces/alpha/pods/other-0//proxy/", "an empty segment"],
    ["get --raw //api/v1/namespaces/alpha/pods/other-0/proxy/", "a host name"],
    ["delete --raw /api/v1/namespaces/alpha/pods/other-0/proxy/x", "into pods, services or nodes"],
    ["proxy --disable-filter", "svc proxy keeps its filter"],
    ["exec --bogus other-0 -- true", "unknown flag: --bogus"],
    ["exec -f {dir}/other-pod.yaml,{dir}/own-pod.yaml -- true", "exactly one object"],
    // Spellings of the pod's type no guard names: read by name, or through kubectl, never let through.
    ["exec pods.v1beta1/other-0 -- true", "cannot check the compartment"],
    ["exec pods.metrics.k8s.io/other-0 -- true", "cannot check the compartment"],
    ["logs PODS/other-0", "Cannot read the logs of pod/other-0 of compartment UK-S-BRAVO"],
    ["port-forward Pod.v1./other-0 :8080", "Cannot execute in pod/other-0 of compartment UK-S-BRAVO"],
  ])("%s", (line, message) => {
    const from = auditSize();
    const r = svc(words(line));
    expect(r.code).toBe(1);
    expect(r.err).toContain(message);
    expect(auditSince(from).filter((e) => e.objectRef?.namespace === "alpha")).toEqual([]);
  });

  test("exec -f of a service file: kubectl is handed the live service, so the file's selector cannot point elsewhere", () => {
    const spy = file("spy.yaml", { ...service("own-svc", ALPHA, "other-app") });
    const from = auditSize();
    const r = svc(["exec", "-f", spy, "--", "true"]);
    expect(r.code).toBe(0);
    expect(touching(auditSince(from), "other-0")).toEqual([]);
    expect(touching(auditSince(from), "own-0").length).toBeGreaterThan(0);
  });
});
