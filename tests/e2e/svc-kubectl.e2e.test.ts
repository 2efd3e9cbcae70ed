import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { appendFileSync, chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { compiled } from "../support/compiled.ts";
import { tempDir } from "../support/dev-api.ts";
import { readLine } from "../support/net.ts";
import { ROOT, spawnProc } from "../support/proc.ts";
import { waitUntil } from "../support/wait.ts";
import { auditSince, auditSize, createContexts, useTestbed } from "./support.ts";
import { kubectlAs } from "./testbed/index.ts";

/**
 * svc as kubectl: commands svc does not own go to the real kubectl with the compartment context's kube
 * context and namespace, and kubectl's output, streams and exit status come back unchanged.
 */
const testbed = useTestbed();
const dir = tempDir("svc-kubectl-e2e-");
const config = join(dir, "config.yaml");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function svc(args: string[], stdin?: string, env: Record<string, string> = {}) {
  const r = Bun.spawnSync([compiled("svc"), ...args], {
    cwd: ROOT,
    env: { ...process.env, SVC_CONFIG: config, KUBECONFIG: testbed().kube.kubeconfig, ...env },
    ...(stdin !== undefined ? { stdin: new TextEncoder().encode(stdin) } : {}),
  });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
}

beforeAll(() => {
  expect(
    createContexts(svc, [
      ["us-ts-alpha", "ALPHA", "testbed-alice", "alpha"],
      ["uk-s-bravo", "BRAVO", "testbed-bob", "bravo"],
    ]),
  ).toEqual([0, 0]);
});

describe("svc passes other commands to kubectl with the compartment context", () => {
  test("the context's kube context decides who you are", () => {
    svc(["context", "use", "us-ts-alpha"]);
    expect(svc(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]).out).toBe("alice");
    svc(["context", "use", "uk-s-bravo"]);
    expect(svc(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]).out).toBe("bob");
  });

  test("the context's namespace is the default; the user's -n wins; kubectl's exit status and stderr come back", () => {
    svc(["context", "use", "us-ts-alpha"]);
    expect(svc(["get", "pods", "-o", "name"]).out).toContain("pod/web-0");
    const denied = svc(["get", "pods", "-n", "bravo"]);
    expect(denied.code).toBe(1);
    expect(denied.err).toContain('User "alice" cannot list resource "pods"');
    const can = svc(["auth", "can-i", "list", "pods", "-n", "bravo"]);
    expect(can.code).toBe(1);
    expect(can.out.trim()).toBe("no");
  });

  test("standard input reaches kubectl", () => {
    const manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-stdin\n";
    const r = svc(["create", "--dry-run=client", "-f", "-", "-o", "name"], manifest);
    expect(r.err).toBe("");
    expect(r.out).toBe("configmap/from-stdin\n");
  });

  /** A kubectl plugin that echoes its name and arguments; returns the PATH that finds it. */
  const plugin = (name: string, says: string) => {
    const bin = join(dir, "bin");
    mkdirSync(bin, { recursive: true });
    writeFileSync(join(bin, name), `#!/bin/sh\necho "${says} $*"\n`);
    chmodSync(join(bin, name), 0o755);
    return { PATH: `${bin}:${process.env.PATH}` };
  };

  test("plugins run too, with the context after their name", () => {
    const path = plugin("kubectl-hello", "hello");
    svc(["context", "use", "us-ts-alpha"]);
    const r = svc(["hello", "world"], undefined, path);
    expect(r.err).toBe("");
    expect(r.out).toContain("hello world --context=testbed-alice");
  });

  test("create plugins (kubectl-create-<name>) run as kubectl runs them", () => {
    const path = plugin("kubectl-create-thing", "thing");
    svc(["context", "use", "us-ts-alpha"]);
    const r = svc(["create", "thing", "x"], undefined, path);
    expect(r.err).toBe("");
    expect(r.out).toContain("thing x --context=testbed-alice");
  });
});

describe("svc identity", () => {
  test("shows the compartment, the cluster's user and groups, and the svc: groups", () => {
    svc(["context", "use", "uk-s-bravo"]);
    const r = svc(["identity"]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("Label:        US-TS-BRAVO\n");
    expect(r.out).toContain("Compartment:  BRAVO\n");
    expect(r.out).toContain("Kube Context: testbed-bob\n");
    expect(r.out).toContain("User:         bob\n");
    const groups = JSON.parse(svc(["identity", "-o", "json"]).out).userGroups;
    expect(groups).toEqual(
      expect.arrayContaining([
        "system:authenticated",
        "svc:country:us",
        "svc:sensitivity:ts",
        "svc:compartment:bravo",
      ]),
    );
  });

  test("shows the clearances the cluster sees, and warns when they do not cover the active compartment", () => {
    // bob's certificate clears him for UK-S-BRAVO; this context is US-TS-BRAVO.
    svc(["context", "use", "uk-s-bravo"]);
    const bob = svc(["identity"]);
    expect(bob.code).toBe(0);
    expect(bob.out).toContain("Clearances:   compartments bravo; countries uk; sensitivity up to s");
    expect(bob.err).toContain(
      "svc: warning: the cluster does not clear you for US-TS-BRAVO (missing: country us, sensitivity ts;",
    );
    expect(JSON.parse(svc(["identity", "-o", "json"]).out).clusterClearances).toEqual({
      countries: ["uk"],
      sensitivities: ["u", "c", "s"],
      compartments: ["bravo"],
      coversActiveCompartment: false,
      basis: "from the cluster's groups",
    });
    svc(["context", "use", "us-ts-alpha"]);
    const alice = svc(["identity"]);
    expect(alice.err).toBe("");
    expect(alice.out).toContain("Clearances:   compartments alpha; countries us; sensitivity up to ts");
  });
});

describe("svc exec keeps to the current compartment", () => {
  beforeAll(() => {
    // Set up as the cluster's admin with kubectl: svc itself refuses relabelling without --force.
    const label = ["-n", "alpha", "label", "--overwrite", "pod"];
    kubectlAs(testbed(), "admin")([...label, "web-0", "svc.io/compartment=US-TS-ALPHA"]);
    kubectlAs(testbed(), "admin")([...label, "stale-0", "svc.io/compartment=UK-S-BRAVO"]);
    expect(
      svc([
        "context",
        "create",
        "us-ts-alpha-admin",
        "--country=US",
        "--sensitivity=TS",
        "--compartment=ALPHA",
        "--kube-context=testbed-admin",
        "--namespace=alpha",
      ]).code,
    ).toBe(0);
  });

  test("a pod of the current compartment: the command runs", () => {
    svc(["context", "use", "us-ts-alpha"]);
    const r = svc(["exec", "web-0", "--", "echo", "inside"]);
    expect(r.code).toBe(0);
    expect(r.out).toBe("inside\n");
  });

  test("a pod of another compartment is refused with the message of docs/svc-guard.md, nothing runs", () => {
    svc(["context", "use", "us-ts-alpha"]);
    const r = svc(["exec", "stale-0", "--", "echo", "inside"]);
    expect(r.code).toBe(1);
    expect(r.out).toBe("");
    // stale-0 was relabelled BRAVO above; its annotations still say us:ts and us:alpha.
    expect(r.err).toBe(
      "svc: Cannot execute in pod/stale-0 (svc.io/compartment=UK-S-BRAVO; marks svc cannot read: its marks name two countries (uk, us)); current compartment: US-TS-ALPHA\n",
    );
    // api-0 has no label, but its annotations (us:ts, us:alpha) mark it ALPHA: cleared, as the cluster
    // decides too (lib/kube/clearance.ts).
    expect(svc(["exec", "api-0", "--", "echo", "inside"])).toMatchObject({ code: 0, out: "inside\n" });
  });

  test("--force: refused for a user the cluster does not allow; allowed, with a warning, for one it does", () => {
    svc(["context", "use", "us-ts-alpha"]);
    const alice = svc(["exec", "--force", "stale-0", "--", "echo", "inside"]);
    expect(alice.code).toBe(1);
    expect(alice.err).toContain("--force refused");
    svc(["context", "use", "us-ts-alpha-admin"]);
    const admin = svc(["exec", "--force", "stale-0", "--", "echo", "inside"]);
    expect(admin.code).toBe(0);
    expect(admin.out).toBe("inside\n");
    expect(admin.err).toContain(
      "--force: exec of pod/stale-0 (svc.io/compartment=UK-S-BRAVO; marks svc cannot read: its marks name two countries (uk, us)) from US-TS-ALPHA",
    );
  });
});

describe("svc get", () => {
  test("tables carry the COMPARTMENT column; the filters select by compartment; -o name stays kubectl's", () => {
    svc(["context", "use", "us-ts-alpha"]);
    const table = svc(["get", "pods"]);
    expect(table.code).toBe(0);
    const [head, ...rows] = table.out.trimEnd().split("\n");
    expect(head?.split(/\s+/)).toEqual(["NAME", "READY", "STATUS", "RESTARTS", "AGE", "COMPARTMENT"]);
    expect(
      rows
        .find((r) => r.startsWith("web-0"))
        ?.split(/\s+/)
        .at(-1),
    ).toBe("US-TS-ALPHA");
    // Other test files add pods of both compartments to namespace alpha.
    const current = svc(["get", "pods", "--current-compartment", "-o", "name"]).out;
    expect(current).toContain("pod/web-0\n");
    expect(current).not.toContain("pod/stale-0");
    const others = svc(["get", "pods", "--exclude-current-compartment", "-o", "name"]).out;
    expect(others).toContain("pod/stale-0");
    expect(others).not.toContain("pod/web-0");
    const bravo = svc(["get", "pods", "--compartment", "UK-S-BRAVO", "-o", "name"]).out;
    expect(bravo).toContain("pod/stale-0\n");
    expect(bravo).not.toContain("pod/web-0");
    expect(svc(["get", "pods", "-o", "name"]).out).not.toContain("COMPARTMENT");
  });
});

describe("svc apply", () => {
  const deployment = [
    "apiVersion: apps/v1",
    "kind: Deployment",
    "metadata: {name: web-e2e, labels: {app: web}}",
    "spec:",
    "  selector: {matchLabels: {app: web}}",
    "  template:",
    "    metadata: {labels: {app: web}}",
    "    spec: {containers: [{name: c, image: nginx}]}",
  ].join("\n");

  test("--dry-run=client -o yaml shows the MLS labels and annotations on the object and its pod template", () => {
    svc(["context", "use", "us-ts-alpha"]);
    const file = join(dir, "deploy.yaml");
    writeFileSync(file, deployment);
    const r = svc(["apply", "-f", file, "--dry-run=client", "-o", "json"]);
    expect(r.err).toBe("");
    const d = JSON.parse(r.out);
    for (const meta of [d.metadata, d.spec.template.metadata]) {
      expect(meta.labels["svc.io/compartment"]).toBe("US-TS-ALPHA");
      expect(meta.annotations["mls.svc.dev/level"]).toBe("us:ts");
      expect(meta.annotations["mls.svc.dev/compartment"]).toBe("us:alpha");
    }
    expect(d.metadata.labels.app).toBe("web");
  });

  test("a multi-document manifest from standard input is applied for real, labelled", () => {
    svc(["context", "use", "us-ts-alpha"]);
    const two =
      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-one}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-two}\n";
    const r = svc(["apply", "-f", "-"], two);
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
    expect(r.out).toContain("configmap/cm-one");
    const labelled = svc(["get", "configmaps", "--current-compartment", "-o", "name"]).out.split("\n");
    expect(labelled).toEqual(expect.arrayContaining(["configmap/cm-one", "configmap/cm-two"]));
    expect(svc(["get", "configmaps", "--exclude-current-compartment", "-o", "name"]).out).not.toContain(
      "cm-one",
    );
  });

  test("bad input: another compartment's object, a missing file, broken YAML", () => {
    svc(["context", "use", "us-ts-alpha"]);
    const foreign = svc(
      ["apply", "-f", "-"],
      "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, labels: {svc.io/compartment: UK-S-BRAVO}}\n",
    );
    expect(foreign.code).toBe(1);
    expect(foreign.err).toBe(
      "svc: Cannot apply across compartments: ConfigMap x is labelled svc.io/compartment=UK-S-BRAVO; current compartment: US-TS-ALPHA\n",
    );
    expect(svc(["apply", "-f", join(dir, "nope.yaml")]).err).toContain(
      "nope.yaml: no such file or directory",
    );
    const broken = join(dir, "broken.yaml");
    writeFileSync(broken, "kind: ConfigMap\nmetadata: {name: [\n");
    expect(svc(["apply", "-f", broken]).err).toMatch(/broken\.yaml:\d+: not valid YAML/);
  });
});

describe("svc create, run and expose mark what they make", () => {
  const admin = (args: string[]) => kubectlAs(testbed(), "admin")(["-n", "alpha", ...args]);
  const marksOf = (what: string, path = "{.metadata}") =>
    JSON.parse(admin(["get", what, "-o", `jsonpath=${path}`]));
  const MARKS = {
    labels: expect.objectContaining({ "svc.io/compartment": "US-TS-ALPHA" }),
    annotations: expect.objectContaining({
      "mls.svc.dev/level": "us:ts",
      "mls.svc.dev/compartment": "us:alpha",
    }),
  };
  beforeAll(() => {
    admin([
      "delete",
      "configmap/made-cm",
      "deploy/made-d",
      "pod/made-run",
      "svc/made-svc",
      "job/made-job",
      "hpa/made-d",
      "svc/made-foreign",
      "pod/made-bravo",
      "--ignore-not-found",
      // Gone before the test creates them again.
      "--force",
      "--grace-period=0",
    ]);
    // A pod of another compartment, whose labels expose would copy.
    admin(["run", "made-bravo", "--image=busybox", "--labels=svc.io/compartment=UK-S-BRAVO"]);
    // The admin's context (made by an earlier block too; "already exists" then).
    createContexts(svc, [["us-ts-alpha-admin", "ALPHA", "testbed-admin", "alpha"]]);
    svc(["context", "use", "us-ts-alpha"]);
  });

  test("each object, its pod template and its selector carry the current compartment", () => {
    for (const args of [
      ["create", "configmap", "made-cm", "--from-literal=k=v"],
      ["create", "deployment", "made-d", "--image=busybox"],
      ["create", "job", "made-job", "--image=busybox", "-o", "name"],
      ["run", "made-run", "--image=busybox", "--", "sleep", "3600"],
      ["expose", "deploy/made-d", "--port=80", "--name=made-svc"],
    ])
      expect({ args, ...svc(args) }).toMatchObject({ args, code: 0, err: "" });
    // No one listed autoscale among the commands that create: it makes an autoscaler all the same (as the
    // admin: alice's role grants none).
    svc(["context", "use", "us-ts-alpha-admin"]);
    expect(svc(["autoscale", "deploy/made-d", "--max=3"])).toMatchObject({ code: 0, err: "" });
    svc(["context", "use", "us-ts-alpha"]);
    for (const what of [
      "configmap/made-cm",
      "deploy/made-d",
      "job/made-job",
      "pod/made-run",
      "svc/made-svc",
      "hpa/made-d",
    ])
      expect({ what, metadata: marksOf(what) }).toMatchObject({ what, metadata: MARKS });
    expect(marksOf("deploy/made-d", "{.spec.template.metadata}")).toMatchObject(MARKS);
    expect(marksOf("deploy/made-d", "{.spec.selector.matchLabels}")).toEqual({
      app: "made-d",
      "svc.io/compartment": "US-TS-ALPHA",
    });
    // run keeps its own label, and its command after --.
    expect(marksOf("pod/made-run", "{.metadata.labels}")).toEqual({
      run: "made-run",
      "svc.io/compartment": "US-TS-ALPHA",
    });
    expect(admin(["get", "pod/made-run", "-o", "jsonpath={.spec.containers[0].args}"])).toBe(
      '["sleep","3600"]',
    );
  });

  test("a preview shows the marks, and nothing is created", () => {
    const r = svc([
      "create",
      "secret",
      "generic",
      "made-preview",
      "--from-literal=k=v",
      "--dry-run=client",
      "-o",
      "yaml",
    ]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("svc.io/compartment: US-TS-ALPHA");
    expect(r.out).toContain("mls.svc.dev/compartment: us:alpha");
    expect(admin(["get", "secret", "made-preview", "--ignore-not-found", "-o", "name"])).toBe("");
  });

  test("what would copy another compartment's labels is refused; what kubectl cannot make is its error", () => {
    const foreign = svc(["expose", "pod/made-bravo", "--port=80", "--name=made-foreign"]);
    expect(foreign.code).toBe(1);
    expect(foreign.err).toContain(
      "Cannot expose across compartments: Service alpha/made-foreign is labelled svc.io/compartment=UK-S-BRAVO",
    );
    const bad = svc(["create", "deployment", "made-bad"]);
    expect(bad.code).toBe(1);
    expect(bad.err).toStartWith("svc: svc create deployment: ");
    expect(bad.err).toMatch(/required flag\(s\) .*image.* not set/);
    expect(admin(["get", "deploy", "made-bad", "--ignore-not-found", "-o", "name"])).toBe("");
  });
});

describe("svc delete", () => {
  test("refuses to delete objects of another compartment, dry runs too; --force asks for the override", () => {
    svc(["context", "use", "us-ts-alpha-admin"]);
    const admin = kubectlAs(testbed(), "admin");
    const make = (name: string, compartment?: string) => {
      admin(["-n", "alpha", "delete", "configmap", name, "--ignore-not-found"]);
      admin(["-n", "alpha", "create", "configmap", name]);
      if (compartment)
        admin(["-n", "alpha", "label", "configmap", name, `svc.io/compartment=${compartment}`]);
    };
    make("del-own", "US-TS-ALPHA");
    make("del-other", "UK-S-BRAVO");
    make("del-forced", "UK-S-BRAVO");
    make("del-unmarked");
    const own = svc(["delete", "configmap", "del-own"]);
    expect(own.code).toBe(0);
    expect(own.err).toBe("");
    for (const extra of [[], ["--dry-run=server", "-o", "yaml"]]) {
      const other = svc(["delete", "configmap", "del-other", ...extra]);
      expect(other.code).toBe(1);
      expect(other.err).toBe(
        "svc: Cannot delete configmap/del-other of compartment UK-S-BRAVO; current compartment: US-TS-ALPHA\n",
      );
      expect(other.out).toBe("");
    }
    const unmarked = svc(["delete", "configmap", "del-unmarked"]);
    expect(unmarked.code).toBe(0);
    expect(unmarked.err).toContain(
      "svc: warning: deleting ConfigMap del-unmarked in namespace alpha, which has no compartment marks",
    );
    // The test bed's admin may override: --force deletes, with a warning.
    const forced = svc(["delete", "configmap", "del-forced", "--force"]);
    expect(forced.code).toBe(0);
    expect(forced.err).toContain(
      "svc: warning: --force: delete of configmap/del-forced of compartment UK-S-BRAVO",
    );
  });
});

describe("svc describe", () => {
  test("highlights the MLS labels and annotations on a terminal; piped or with NO_COLOR it is kubectl's text", () => {
    svc(["context", "use", "us-ts-alpha"]);
    // script(1) gives svc a terminal.
    const tty = Bun.spawnSync(
      ["timeout", "30", "script", "-qec", `${compiled("svc")} describe pod web-0`, "/dev/null"],
      {
        cwd: ROOT,
        env: { ...process.env, SVC_CONFIG: config, KUBECONFIG: testbed().kube.kubeconfig, TERM: "xterm" },
      },
    ).stdout.toString();
    expect(tty).toContain("\u001b[1;33msvc.io/compartment=US-TS-ALPHA\u001b[0m");
    expect(tty).toContain("\u001b[1;33mmls.svc.dev/compartment: us:alpha\u001b[0m");
    const piped = svc(["describe", "pod", "web-0"]);
    expect(piped.out).toContain("svc.io/compartment=US-TS-ALPHA");
    expect(piped.out).not.toContain("\u001b[");
    const noColor = Bun.spawnSync(
      ["timeout", "30", "script", "-qec", `${compiled("svc")} describe pod web-0`, "/dev/null"],
      {
        cwd: ROOT,
        env: {
          ...process.env,
          SVC_CONFIG: config,
          KUBECONFIG: testbed().kube.kubeconfig,
          TERM: "xterm",
          NO_COLOR: "1",
        },
      },
    ).stdout.toString();
    expect(noColor).not.toContain("\u001b[1;33m");
  });
});

describe("audit log", () => {
  test("records allowed, refused and forced commands with the context, compartment and exit status", () => {
    const log = join(dir, "audit.log");
    appendFileSync(config, `auditLog: {enabled: true, path: ${log}, level: debug}\n`);
    svc(["context", "use", "us-ts-alpha"]);
    svc(["get", "pods", "-o", "name"]);
    svc(["exec", "stale-0", "--", "echo", "x"]);
    svc(["context", "use", "us-ts-alpha-admin"]);
    svc(["exec", "--force", "stale-0", "--", "echo", "x"]);
    const entries = readFileSync(log, "utf8")
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(entries.map((e) => [e.level, e.decision, e.exitStatus, e.command[1]])).toEqual([
      ["info", "allowed", 0, "context"],
      ["debug", "allowed", 0, "get"],
      ["error", "refused", 1, "exec"],
      ["info", "allowed", 0, "context"],
      ["warn", "forced", 0, "exec"],
    ]);
    expect(entries[2]).toMatchObject({
      context: "us-ts-alpha",
      compartment: "US-TS-ALPHA",
      targets: ["pod/alpha/stale-0"],
    });
    expect(entries[3]).toMatchObject({ context: "us-ts-alpha-admin", previousContext: "us-ts-alpha" });
    expect(entries[4].context).toBe("us-ts-alpha-admin");
    expect(entries[0].time).toMatch(/^\d{4}-\d\d-\d\dT/);
  });
});

describe("shell completion", () => {
  test("bash: resource names come from the compartment context's cluster, also when svc is aliased as kubectl", () => {
    svc(["context", "use", "us-ts-alpha"]);
    const script = join(dir, "svc.bash");
    writeFileSync(script, svc(["completion", "bash"]).out);
    expect(Bun.spawnSync(["bash", "-n", script]).exitCode).toBe(0);
    // The script runs `svc __complete …`: put an svc on PATH.
    const bin = join(dir, "svcbin");
    mkdirSync(bin, { recursive: true });
    writeFileSync(join(bin, "svc"), `#!/bin/sh\nexec ${compiled("svc")} "$@"\n`);
    chmodSync(join(bin, "svc"), 0o755);
    const complete = (line: string[]) =>
      Bun.spawnSync(
        [
          "bash",
          "-c",
          `source /usr/share/bash-completion/bash_completion; source ${script}; COMP_WORDS=(${line.map((w) => `"${w}"`).join(" ")}); COMP_CWORD=${line.length - 1}; COMP_LINE="${line.join(" ")}"; COMP_POINT=\${#COMP_LINE}; __start_svc 2>/dev/null; printf "%s\\n" "\${COMPREPLY[@]}"`,
        ],
        {
          env: {
            ...process.env,
            PATH: `${bin}:${process.env.PATH}`,
            SVC_CONFIG: config,
            KUBECONFIG: testbed().kube.kubeconfig,
          },
        },
      ).stdout.toString();
    expect(complete(["kubectl", "get", "pods", ""]).split("\n")).toEqual(
      expect.arrayContaining(["web-0", "api-0"]),
    );
    expect(complete(["svc", "con"]).split("\n")).toEqual(expect.arrayContaining(["context", "config"]));
    expect(complete(["svc", "context", "use", ""]).split("\n")).toEqual(
      expect.arrayContaining(["us-ts-alpha", "uk-s-bravo"]),
    );
  });

  test("zsh and fish scripts are kubectl's, renamed for svc and registered for kubectl too; an unknown shell is refused", () => {
    expect(svc(["completion", "zsh"]).out).toContain("compdef _svc svc kubectl");
    const fish = svc(["completion", "fish"]).out;
    expect(fish).toContain("svc __complete");
    expect(fish).toContain("complete -c kubectl");
    expect(svc(["completion", "tcsh"]).err).toBe('svc: unknown shell "tcsh" (allowed: bash, zsh, fish)\n');
  });
});

describe("kubectl's other commands through svc", () => {
  test("drop-in forms: version --client, global flags before the command, apply help and subcommands, a KUBECONFIG list", () => {
    svc(["context", "use", "us-ts-alpha"]);
    expect(svc(["version", "--client"]).out).toContain("Client Version: v1.32");
    const json = JSON.parse(svc(["-n", "alpha", "version", "--client", "-o", "json"]).out);
    expect(json.clientVersion.major).toBe("1");
    const help = svc(["apply", "--help"]);
    expect(help.code).toBe(0);
    expect(help.out).toContain("Apply a configuration to a resource");
    expect(svc(["apply", "view-last-applied", "--help"]).code).toBe(0);
    // kubectl merges a KUBECONFIG list; svc leaves it to kubectl instead of passing it as one file.
    const extra = join(dir, "extra-kubeconfig");
    writeFileSync(extra, "apiVersion: v1\nkind: Config\npreferences: {}\n");
    const listed = svc(["get", "pods", "-o", "name"], undefined, {
      KUBECONFIG: `${extra}:${testbed().kube.kubeconfig}`,
    });
    expect(listed.err).toBe("");
    expect(listed.out).toContain("pod/web-0");
  });

  test("logs in the compartment context (kwok's exec does not end on stdin EOF, so stdin is tested with create -f -)", () => {
    svc(["context", "use", "us-ts-alpha"]);
    const marker = `svc-${Date.now()}`;
    appendFileSync(testbed().kube.podLog, `${new Date().toISOString()} stdout F through svc ${marker}\n`);
    const logs = svc(["logs", "web-0"]);
    expect(logs.code).toBe(0);
    expect(logs.out).toContain(`through svc ${marker}`);
  });

  test("logs --tail, --since, --previous and -f", async () => {
    svc(["context", "use", "us-ts-alpha"]);
    const first = `svc-tail-${Date.now()}`;
    appendFileSync(testbed().kube.podLog, `${new Date().toISOString()} stdout F ${first}\n`);
    const tail = svc(["logs", "web-0", "--tail=1", "--since=1h"]);
    expect(tail.code).toBe(0);
    expect(tail.out).toBe(`${first}\n`);
    const previous = svc(["logs", "web-0", "--previous"]);
    expect(previous.code).toBe(0);
    expect(previous.out).toContain("the previous container");
    const follow = spawnProc([compiled("svc"), "logs", "-f", "web-0", "--tail=1"], {
      SVC_CONFIG: config,
      KUBECONFIG: testbed().kube.kubeconfig,
    });
    await follow.waitFor((l) => l === first, 30_000);
    const next = `svc-follow-${Date.now()}`;
    appendFileSync(testbed().kube.podLog, `${new Date().toISOString()} stdout F ${next}\n`);
    await follow.waitFor((l) => l === next, 30_000);
    await follow.stop();
  }, 60_000);

  test("cp both ways (the test bed's pods run commands on this host, in its file system)", async () => {
    svc(["context", "use", "us-ts-alpha"]);
    const inPod = join(dir, "in-pod.txt");
    writeFileSync(inPod, "from the pod\n");
    const out = svc(["cp", `web-0:${inPod}`, join(dir, "copied-out.txt")]);
    expect(out.code).toBe(0);
    expect(readFileSync(join(dir, "copied-out.txt"), "utf8")).toBe("from the pod\n");
    const local = join(dir, "local.txt");
    writeFileSync(local, "from here\n");
    const podSide = join(dir, "pod-side");
    // kwok's exec does not pass on the end of standard input, so tar in the "pod" never sees the end of
    // the archive and extracts nothing: what is checked is that kubectl, through svc, reached the pod
    // with its tar command (the API server's audit log shows the exec request and its command).
    const from = auditSize(testbed());
    const into = spawnProc([compiled("svc"), "cp", local, `alpha/web-0:${podSide}/copied-in.txt`], {
      SVC_CONFIG: config,
      KUBECONFIG: testbed().kube.kubeconfig,
    });
    const reached = () =>
      auditSince(testbed(), from)
        .filter((e) => e.objectRef?.subresource === "exec" && e.objectRef.name === "web-0")
        .map((e) => decodeURIComponent(e.requestURI))
        .filter((uri) => uri.includes("command=tar"));
    await waitUntil("the tar request of cp", () => reached().length > 0, 30_000).finally(() => into.stop());
    expect(reached()[0]).toContain(`command=tar&command=-xmf&command=-&command=-C&command=${podSide}`);
  });

  test("exec -it gets a terminal", () => {
    svc(["context", "use", "us-ts-alpha"]);
    // Told by the exit status of `test -t 0` in the pod (kwok sometimes loses the output of a command that
    // ends at once): 0 with -t, a failure without it.
    const inTerminal = (flags: string) =>
      Bun.spawnSync(
        [
          "timeout",
          "30",
          "script",
          "-qec",
          `${compiled("svc")} exec ${flags} web-0 -- test -t 0`,
          "/dev/null",
        ],
        { cwd: ROOT, env: { ...process.env, SVC_CONFIG: config, KUBECONFIG: testbed().kube.kubeconfig } },
      ).exitCode;
    expect(inTerminal("-it")).toBe(0);
    expect(inTerminal("-i")).not.toBe(0);
  });
});

describe("svc apply sources and bad inputs", () => {
  test("-k (kustomize) and an http URL are read, injected and applied", async () => {
    svc(["context", "use", "us-ts-alpha"]);
    const k = join(dir, "kustomize");
    mkdirSync(k, { recursive: true });
    writeFileSync(join(k, "kustomization.yaml"), "resources: [cm.yaml]\nnamePrefix: k-\n");
    writeFileSync(join(k, "cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-kustomize}\n");
    const viaK = JSON.parse(svc(["apply", "-k", k, "--dry-run=client", "-o", "json"]).out);
    expect(viaK.metadata.name).toBe("k-from-kustomize");
    expect(viaK.metadata.labels["svc.io/compartment"]).toBe("US-TS-ALPHA");
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: () => new Response("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-url}\n"),
    });
    try {
      const p = Bun.spawn(
        [
          compiled("svc"),
          "apply",
          "-f",
          `http://127.0.0.1:${server.port}/cm.yaml`,
          "--dry-run=client",
          "-o",
          "json",
        ],
        {
          cwd: ROOT,
          env: { ...process.env, SVC_CONFIG: config, KUBECONFIG: testbed().kube.kubeconfig },
          stdout: "pipe",
        },
      );
      const viaUrl = JSON.parse(await new Response(p.stdout).text());
      expect(await p.exited).toBe(0);
      expect(viaUrl.metadata.annotations["mls.svc.dev/compartment"]).toBe("us:alpha");
    } finally {
      server.stop(true);
    }
  });

  test.each([
    ["an unknown context", ["context", "use", "nowhere"], 'Context not found: "nowhere"'],
    ["apply without -f or -k", ["apply"], "svc apply needs -f <file|url|dir|-> or -k <dir>"],
    [
      "a missing manifest",
      ["apply", "-f", "/nonexistent/x.yaml"],
      "-f /nonexistent/x.yaml: no such file or directory",
    ],
    [
      "a bad compartment filter",
      ["get", "pods", "--compartment", "a b"],
      "expected a compartment label <COUNTRY>-<SENSITIVITY>-<COMPARTMENT>",
    ],
    [
      "a compartment name where its label belongs",
      ["get", "pods", "--compartment", "bravo"],
      '--compartment "bravo": expected a compartment label <COUNTRY>-<SENSITIVITY>-<COMPARTMENT>, such as UK-S-BRAVO',
    ],
    [
      "two compartment filters",
      ["get", "pods", "--current-compartment", "--exclude-current-compartment"],
      "use one of",
    ],
    ["an unknown shell", ["completion", "tcsh"], 'unknown shell "tcsh"'],
  ])("%s is refused with a clear error", (_name, args, message) => {
    svc(["context", "use", "us-ts-alpha"]);
    const r = svc(args as string[]);
    expect(r.code).toBe(1);
    expect(r.err).toContain(message as string);
  });

  test("a broken configuration file stops every command with the file, line and field", () => {
    const broken = join(dir, "broken-config.yaml");
    writeFileSync(
      broken,
      "currentContext: x\ncontexts:\n  x: {country: US, sensitivity: TS, compartment: A}\n",
    );
    const r = Bun.spawnSync([compiled("svc"), "get", "pods"], {
      cwd: ROOT,
      env: { ...process.env, SVC_CONFIG: broken, KUBECONFIG: testbed().kube.kubeconfig },
    });
    expect(r.exitCode).toBe(1);
    expect(r.stderr.toString()).toContain(`${broken}:3: contexts.x.kubeContext: is required`);
  });
});

describe("svc port-forward", () => {
  test("forwards in the compartment context; SIGTERM reaches kubectl and svc exits", async () => {
    svc(["context", "use", "us-ts-alpha"]);
    const tb = testbed();
    const target = createServer((sock) => sock.end("pong\n"));
    await new Promise<void>((r) => target.listen(tb.kube.forwardPort, "127.0.0.1", () => r()));
    try {
      const pf = spawnProc([compiled("svc"), "port-forward", "pod/web-0", ":8080"], {
        SVC_CONFIG: config,
        KUBECONFIG: tb.kube.kubeconfig,
      });
      const line = await pf.waitFor((l) => l.startsWith("Forwarding from 127.0.0.1:"), 30_000);
      const port = Number(/127\.0\.0\.1:(\d+)/.exec(line)?.[1]);
      const got = await readLine(port);
      expect(got).toBe("pong\n");
      pf.proc.kill("SIGTERM");
      expect(await pf.exited).not.toBe(0);
    } finally {
      target.close();
    }
  }, 60_000);
});
