import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import { compiled } from "../support/compiled.ts";
import { tempDir } from "../support/dev-api.ts";
import { ROOT } from "../support/proc.ts";
import { waitUntil } from "../support/wait.ts";
import { auditSince, auditSize, createContexts, kubectlUser, useTestbed } from "./support.ts";
import type { KubeState } from "./testbed/kube.ts";
import { NODE } from "./testbed/kube.ts";

/**
 * Reads across compartments with plain kubectl, decided by svc-proxy's authorization webhook (the test
 * bed's kube-apiserver runs deploy/admission/authorization): in namespace `shared`, where alice (ALPHA) and
 * bob (BRAVO) both hold the standard `edit` role, neither reads the other compartment's Secrets,
 * ConfigMaps or pod logs, by name, by workload, by selector, following or watching; olivia's override
 * passes and is logged; list views without data show every compartment's objects; with the webhook
 * stopped, guarded reads are denied and nothing else is.
 */
const testbed = useTestbed();
const NS = "shared";
const MARK = { alpha: "US-TS-ALPHA", bravo: "UK-S-BRAVO" } as const;
type User = keyof KubeState["users"];
const kubectl = (user: User, args: string[], input?: string) => kubectlUser(testbed(), user, NS, args, input);

const labels = (c: keyof typeof MARK) => ({ "svc.io/compartment": MARK[c], "svc-test": "reads" });
const secret = (name: string, token: string, labelled: Record<string, string>) => ({
  apiVersion: "v1",
  kind: "Secret",
  metadata: { name, labels: labelled },
  stringData: { token },
});
const objects = (c: keyof typeof MARK) => [
  secret(`secret-${c}`, `${c}-secret-value`, labels(c)),
  // Read only while the webhook is stopped: the API server keeps the webhook's answers for 5 s, per object.
  secret(`secret-${c}-2`, `${c}-second-value`, labels(c)),
  {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: `config-${c}`, labels: labels(c) },
    data: { setting: `${c}-config-value` },
  },
  {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: `reader-${c}`, labels: { ...labels(c), app: `reader-${c}` } },
    spec: { nodeName: NODE, containers: [{ name: "main", image: "busybox" }] },
  },
  {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: `web-${c}`, labels: labels(c) },
    spec: {
      replicas: 1,
      selector: { matchLabels: { app: `web-${c}` } },
      template: {
        metadata: { labels: { ...labels(c), app: `web-${c}` } },
        spec: { nodeName: NODE, containers: [{ name: "main", image: "busybox" }] },
      },
    },
  },
];

const FORBIDDEN =
  /Error from server \(Forbidden\).*Cannot (read|read the logs of) (secret|config map|pod) in another compartment \(UK-S-BRAVO\)/;

/** A Secret with no marks: RBAC's alone by default (unlabeled_reads: allow). */
const UNMARKED = secret("secret-unmarked", "unmarked-value", { "svc-test": "reads" });

beforeAll(async () => {
  const docs = [...objects("alpha"), ...objects("bravo"), UNMARKED].map((o) => stringify(o)).join("---\n");
  expect(kubectl("admin", ["apply", "-f", "-"], docs).err).toBe("");
  await waitUntil(
    "every reader and web pod running",
    () =>
      kubectl("admin", ["get", "pods", "-l", "svc-test=reads", "-o", "jsonpath={.items[*].status.phase}"])
        .out.split(" ")
        .filter((p) => p === "Running").length === 4,
    60_000,
  );
});

afterAll(() => {
  kubectl("admin", ["delete", "deploy,pod,secret,configmap", "-l", "svc-test=reads", "--wait=false"]);
  rmSync(dir, { recursive: true, force: true });
});

const dir = tempDir("svc-reads-e2e-");
/** svc as the test bed's alice (or olivia), in an ALPHA compartment context on namespace shared. */
function svc(as: "alice" | "olivia" | "bob", args: string[]) {
  const r = Bun.spawnSync([compiled("svc"), ...args], {
    cwd: ROOT,
    env: { ...process.env, SVC_CONFIG: join(dir, `${as}.yaml`), KUBECONFIG: testbed().kube.kubeconfig },
  });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
}
/** The webhook's log lines about `user` reading `object` (in namespace shared). */
const webhookLines = (user: string, object: string) =>
  readFileSync(testbed().kube.admission.log, "utf8")
    .split("\n")
    .filter((l) => l.includes(`"user":"${user}"`) && l.includes(`"object":"${NS}/${object}`));

// alice and olivia in an ALPHA compartment context on namespace shared.
beforeAll(() => {
  for (const as of ["alice", "olivia"] as const)
    expect(
      createContexts(
        (args) => svc(as, args),
        [["us-ts-alpha", "ALPHA", testbed().kube.users[as].context, NS]],
      ),
    ).toEqual([0]);
  for (const as of ["alice", "olivia"] as const)
    expect(svc(as, ["context", "use", "us-ts-alpha"]).code).toBe(0);
});

describe("the same reads through svc", () => {
  test("alice's reads of BRAVO data are refused by svc before kubectl asks for them; her own pass", () => {
    for (const [args, what, object] of [
      [["get", "secret", "secret-bravo", "-o", "yaml"], "secret/secret-bravo", "secret-bravo"],
      [["get", "secret/secret-bravo", "-o", "jsonpath={.data}"], "secret/secret-bravo", "secret-bravo"],
      [["get", "secrets", "-o", "json"], "secret/secret-bravo", "secret-bravo"],
      [
        ["get", "secrets", "-l", "svc-test=reads", "-o", "go-template={{.items}}"],
        "secret/secret-bravo",
        "secret-bravo",
      ],
      [["get", "cm,secret", "-o", "custom-columns=D:.data"], "configmap/config-bravo", "config-bravo"],
      [["describe", "configmap", "config-bravo"], "configmap/config-bravo", "config-bravo"],
      // The type as kubectl also reads it: kind, TYPE.VERSION.GROUP with the core group left empty.
      [["get", "Secret.v1.", "secret-bravo", "-o", "yaml"], "secret/secret-bravo", "secret-bravo"],
      [["get", "secrets..", "secret-bravo", "-o", "json"], "secret/secret-bravo", "secret-bravo"],
      [["get", "cm.", "config-bravo", "-o", "yaml"], "configmap/config-bravo", "config-bravo"],
      [
        ["apply", "view-last-applied", "secret", "secret-bravo"],
        "the last applied configuration of secret/secret-bravo",
        "secret-bravo",
      ],
      [
        ["apply", "view-last-applied", "secret/secret-bravo", "-o", "json"],
        "the last applied configuration of secret/secret-bravo",
        "secret-bravo",
      ],
      [["describe", "configmap", "config-br"], "configmap/config-bravo", "config-bravo"],
      [["logs", "reader-bravo"], "the logs of pod/reader-bravo", "reader-bravo"],
      [["logs", "deploy/web-bravo", "-f"], "the logs of pod/web-bravo", "web-bravo"],
      [
        ["logs", "-l", "app=reader-bravo", "--all-containers"],
        "the logs of pod/reader-bravo",
        "reader-bravo",
      ],
    ] as const) {
      const before = webhookLines("alice", object).length;
      const r = svc("alice", [...args]);
      expect({ args, code: r.code, out: r.out }).toEqual({ args, code: 1, out: "" });
      // One line: the object, its compartment and the current one.
      expect(r.err).toMatch(
        new RegExp(
          `^svc: Cannot read ${what.replaceAll(".", "\\.")}\\S* of compartment UK-S-BRAVO; current compartment: US-TS-ALPHA\n$`,
        ),
      );
      // kubectl never ran: the webhook saw no read of the object by alice.
      expect(webhookLines("alice", object).length).toBe(before);
    }
    // A delete answers with the object (kubectl prints only its name; a raw DELETE prints it whole).
    const deleted = svc("alice", ["delete", "secret", "secret-bravo", "--dry-run=server", "-o", "name"]);
    expect({ code: deleted.code, out: deleted.out }).toEqual({ code: 1, out: "" });
    expect(deleted.err).toContain("Cannot delete secret/secret-bravo of compartment UK-S-BRAVO");
    // A delete whose objects svc cannot look up is refused: -f names them, and kubectl reads them by
    // name, which the cluster refuses alice; a type the server does not have.
    const file = join(dir, "config-bravo.yaml");
    writeFileSync(file, stringify(objects("bravo")[2]));
    for (const [args, says] of [
      [
        ["delete", "-f", file],
        "Cannot read config map in another compartment (UK-S-BRAVO) (the cluster refused svc's read)",
      ],
      [
        ["delete", "widgets", "x"],
        'cannot check the compartment: kubectl get widgets --ignore-not-found: error: the server doesn\'t have a resource type "widgets"',
      ],
    ] as const) {
      const r = svc("alice", [...args]);
      expect({ args, code: r.code, out: r.out }).toEqual({ args, code: 1, out: "" });
      expect(r.err).toContain(says);
    }
    expect(kubectl("admin", ["get", "configmap", "config-bravo", "-o", "name"]).out).toBe(
      "configmap/config-bravo\n",
    );
    // edit reads the object whole itself first: the cluster refuses svc that read, and svc says so.
    const edit = svc("alice", ["edit", "secret", "secret-bravo"]);
    expect(edit.code).toBe(1);
    expect(edit.err).toContain(
      "Cannot read secret in another compartment (UK-S-BRAVO) (the cluster refused svc's read)",
    );
    for (const args of [
      ["get", "secret", "secret-alpha", "-o", "jsonpath={.data.token}"],
      ["get", "secret", "secret-unmarked", "-o", "yaml"],
      ["get", "secrets", "--current-compartment", "-o", "yaml"],
      ["get", "secrets", "-l", "svc-test=reads"],
      ["describe", "configmap", "config-alpha"],
      ["logs", "reader-alpha"],
      ["apply", "view-last-applied", "secret", "secret-alpha"],
    ])
      expect({ args, code: svc("alice", args).code }).toEqual({ args, code: 0 });
    // A list view without data shows both compartments, in the COMPARTMENT column.
    const table = svc("alice", ["get", "secrets", "-l", "svc-test=reads"]);
    expect(table.out).toContain("UK-S-BRAVO");
    expect(table.out).toContain("US-TS-ALPHA");
  });

  test("svc learns a Secret's compartment from a list of metadata, never of data", () => {
    const from = auditSize(testbed());
    expect(svc("alice", ["get", "secret", "secret-bravo", "-o", "yaml"]).code).toBe(1);
    expect(svc("alice", ["describe", "secrets", "-l", "svc-test=reads"]).code).toBe(1);
    // The lists svc made itself (a PartialObjectMetadataList, lib/kube/metadata.ts), named svc/… in the
    // API server's audit log; kubectl, which would list the Secrets whole, never ran.
    const lists = auditSince(testbed(), from).filter(
      (e) => e.verb === "list" && e.objectRef?.resource === "secrets" && e.user.username === "alice",
    );
    expect(lists.map((e) => e.userAgent?.split("/")[0])).toEqual(["svc", "svc"]);
    expect(lists.map((e) => e.requestURI)).toEqual([
      "/api/v1/namespaces/shared/secrets?limit=500",
      "/api/v1/namespaces/shared/secrets?limit=500&labelSelector=svc-test%3Dreads",
    ]);
  });

  test("--force: refused for alice, who may not override; olivia's read passes with a warning", () => {
    const alice = svc("alice", ["get", "secret", "secret-bravo", "-o", "yaml", "--force"]);
    expect(alice.code).toBe(1);
    expect(alice.err).toContain("--force refused: you may not override compartments");
    const olivia = svc("olivia", [
      "get",
      "secret",
      "secret-bravo",
      "-o",
      "jsonpath={.data.token}",
      "--force",
    ]);
    expect({ code: olivia.code, out: olivia.out === "" }).toEqual({ code: 0, out: false });
    expect(olivia.out).toBe(Buffer.from("bravo-secret-value").toString("base64"));
    expect(olivia.err).toContain(
      "--force: get of secret/secret-bravo of compartment UK-S-BRAVO from US-TS-ALPHA",
    );
  });
});

describe("identities through svc", () => {
  const account = (name: string, labelled: Record<string, string>) => ({
    apiVersion: "v1",
    kind: "ServiceAccount",
    metadata: { name, labels: labelled },
  });
  beforeAll(() => {
    // Labelled apart from the file's other objects, which the tests after these still read.
    const own = (c: keyof typeof MARK) => ({ ...labels(c), "svc-test": "identities" });
    const docs = [
      account("reads-alpha", own("alpha")),
      account("reads-bravo", own("bravo")),
      account("reads-plain", { "svc-test": "identities" }),
      // A token is bound only to a pod that runs as its account.
      ...(["alpha", "bravo"] as const).map((c) => ({
        apiVersion: "v1",
        kind: "Pod",
        metadata: { name: `token-${c}`, labels: own(c) },
        spec: { serviceAccountName: "reads-plain", containers: [{ name: "main", image: "busybox" }] },
      })),
    ];
    expect(kubectl("admin", ["apply", "-f", "-"], docs.map((d) => stringify(d)).join("---\n")).err).toBe("");
  });
  afterAll(() =>
    kubectl("admin", ["delete", "pod,serviceaccount", "-l", "svc-test=identities", "--wait=false"]),
  );

  /** What reached the API server as an impersonated account or as a token request, since `from`. */
  const acted = (from: number) =>
    auditSince(testbed(), from).filter(
      (e) => e.impersonatedUser !== undefined || e.objectRef?.subresource === "token",
    );
  const as = (name: string) => `--as=system:serviceaccount:${NS}:${name}`;

  test("another compartment's account, or one that does not exist, is refused before kubectl acts as it", () => {
    for (const [args, says] of [
      [
        [as("reads-bravo"), "get", "pods"],
        "Cannot impersonate serviceaccount/reads-bravo of compartment UK-S-BRAVO",
      ],
      [
        ["get", "pods", "--as", `system:serviceaccount:${NS}:reads-bravo`],
        "Cannot impersonate serviceaccount/reads-bravo",
      ],
      // Any command, guarded or not.
      [[as("reads-bravo"), "auth", "whoami"], "Cannot impersonate serviceaccount/reads-bravo"],
      [[as("reads-alpha"), as("reads-bravo"), "version"], "Cannot impersonate serviceaccount/reads-bravo"],
      [
        [as("reads-nobody"), "get", "pods"],
        `Cannot impersonate service account ${NS}/reads-nobody: it does not exist`,
      ],
      [["--as=system:serviceaccount:shared", "get", "pods"], "not a service account's user name"],
      [["--as=system:serviceaccount:a:b:c", "get", "pods"], "not a service account's user name"],
      [
        ["create", "token", "reads-bravo"],
        "Cannot request a token for serviceaccount/reads-bravo of compartment UK-S-BRAVO",
      ],
      [
        [
          "create",
          "token",
          "reads-plain",
          "--bound-object-kind",
          "Pod",
          "--bound-object-name",
          "reader-bravo",
        ],
        "Cannot bind a token to pod/reader-bravo of compartment UK-S-BRAVO",
      ],
    ] as const) {
      const from = auditSize(testbed());
      const r = svc("alice", [...args]);
      expect({ args, code: r.code, out: r.out }).toEqual({ args, code: 1, out: "" });
      expect(r.err).toContain(says);
      expect(acted(from)).toEqual([]);
    }
    for (const args of [
      [as("reads-alpha"), "auth", "whoami"],
      [as("reads-plain"), "auth", "whoami"],
      ["create", "token", "reads-alpha"],
      ["create", "token", "reads-plain", "--bound-object-kind=Pod", "--bound-object-name=token-alpha"],
    ]) {
      const from = auditSize(testbed());
      expect({ args, code: svc("alice", args).code }).toEqual({ args, code: 0 });
      expect(acted(from).length).toBeGreaterThan(0);
    }
  });

  test("olivia's override impersonates and binds across compartments, with a warning", () => {
    // The cluster lets olivia act as the account, which no role lets list pods.
    const r = svc("olivia", [as("reads-bravo"), "get", "pods", "--force"]);
    expect(r.err).toContain("--force: get of serviceaccount/reads-bravo of compartment UK-S-BRAVO");
    expect(r.err).toContain(`User "system:serviceaccount:${NS}:reads-bravo" cannot list resource "pods"`);
    const t = svc("olivia", ["create", "token", "reads-bravo", "--force"]);
    expect(t.code).toBe(0);
    expect(t.err).toContain("--force: create token of serviceaccount/reads-bravo of compartment UK-S-BRAVO");
  });
});

describe("reads across compartments through the API server", () => {
  test("alice reads ALPHA's Secret, ConfigMap and pod logs, and none of BRAVO's, whatever the form", () => {
    expect(kubectl("alice", ["get", "secret", "secret-alpha", "-o", "jsonpath={.data.token}"]).out).toBe(
      Buffer.from("alpha-secret-value").toString("base64"),
    );
    expect(kubectl("alice", ["get", "configmap", "config-alpha", "-o", "yaml"]).out).toContain(
      "alpha-config-value",
    );
    expect(kubectl("alice", ["logs", "reader-alpha"]).code).toBe(0);
    expect(kubectl("alice", ["logs", "deploy/web-alpha"]).code).toBe(0);

    for (const args of [
      ["get", "secret", "secret-bravo", "-o", "yaml"],
      ["get", "secret", "secret-bravo", "-o", "json"],
      ["get", "secret", "secret-bravo", "-o", "jsonpath={.data}"],
      ["get", "secret", "secret-bravo", "-o", "go-template={{.data}}"],
      ["get", "secret", "secret-bravo", "--watch", "-o", "yaml"],
      ["get", "secrets", "--field-selector", "metadata.name=secret-bravo", "-o", "yaml"],
      ["describe", "secret", "secret-bravo"],
      ["get", "configmap", "config-bravo", "-o", "yaml"],
      ["get", "configmap", "config-bravo", "--watch", "-o", "json"],
      ["describe", "configmap", "config-bravo"],
      ["logs", "reader-bravo"],
      ["logs", "pod/reader-bravo", "--all-containers"],
      ["logs", "reader-bravo", "-f"],
      ["logs", "reader-bravo", "--previous"],
      ["logs", "deploy/web-bravo"],
      ["logs", "-l", "app=web-bravo"],
    ]) {
      const r = kubectl("alice", args);
      expect({ args, code: r.code, out: r.out.includes("bravo-") }).toEqual({ args, code: 1, out: false });
      expect({ args, err: r.err }).toMatchObject({ args, err: expect.stringMatching(FORBIDDEN) });
    }
  });

  test("an unmarked Secret is RBAC's alone: alice and bob read it", () => {
    for (const user of ["alice", "bob"] as const)
      expect(kubectl(user, ["get", "secret", "secret-unmarked", "-o", "jsonpath={.data.token}"]).out).toBe(
        Buffer.from("unmarked-value").toString("base64"),
      );
  });

  test("bob the other way round", () => {
    expect(kubectl("bob", ["get", "secret", "secret-bravo", "-o", "jsonpath={.data.token}"]).out).toBe(
      Buffer.from("bravo-secret-value").toString("base64"),
    );
    expect(kubectl("bob", ["logs", "reader-bravo"]).code).toBe(0);
    const r = kubectl("bob", ["get", "configmap", "config-alpha", "-o", "yaml"]);
    expect(r.code).toBe(1);
    expect(r.err).toContain("Cannot read config map in another compartment (US-TS-ALPHA)");
  });

  test("list views without data show every compartment's objects", () => {
    for (const kind of ["secrets", "configmaps", "pods"]) {
      const r = kubectl("alice", ["get", kind, "-l", "svc-test=reads", "-o", "name"]);
      expect(r.code).toBe(0);
      expect(r.out).toContain("-alpha");
      expect(r.out).toContain("-bravo");
    }
  });

  test("olivia's override reads BRAVO's Secret, and the webhook logs it", async () => {
    const r = kubectl("olivia", ["get", "secret", "secret-bravo", "-o", "jsonpath={.data.token}"]);
    expect(r.out).toBe(Buffer.from("bravo-secret-value").toString("base64"));
    const log = testbed().kube.admission.log;
    await waitUntil("the override logged", async () =>
      (await Bun.file(log).text())
        .split("\n")
        .some(
          (l) =>
            l.includes('"compartment override"') &&
            l.includes('"user":"olivia"') &&
            l.includes('"object":"shared/secret-bravo"'),
        ),
    );
  });

  test("with the webhook stopped, guarded reads are denied and nothing else is", () => {
    const pid = testbed().kube.pids.admission as number;
    process.kill(pid, "SIGSTOP");
    try {
      // Objects not read before: no answer of the webhook is kept for them.
      // The API server answers 500, naming the webhook call that failed (kube-apiserver v1.32).
      for (const [user, name] of [
        ["alice", "secret-alpha-2"],
        ["bob", "secret-bravo-2"],
      ] as const) {
        const r = kubectl(user, ["get", "secret", name, "-o", "yaml"]);
        expect({ code: r.code, out: r.out }).toEqual({ code: 1, out: "" });
        expect(r.err).toContain("/authorize");
      }
      for (const args of [
        ["get", "secrets", "-l", "svc-test=reads"],
        ["get", "pods"],
        ["get", "deploy", "web-alpha", "-o", "yaml"],
      ])
        expect({ args, code: kubectl("alice", args).code }).toEqual({ args, code: 0 });
    } finally {
      process.kill(pid, "SIGCONT");
    }
  });
});

// In a namespace of its own: the webhook keeps an override answer for 10 s per user and namespace (a
// refusal included), and other tests ask it about bob in namespaces shared and bravo.
describe("a namespaced override", () => {
  test("an override granted in one namespace (a RoleBinding) holds there, for svc and the cluster alike", () => {
    const OWN_NS = "reads-override";
    const admin = (args: string[], input?: string) => kubectlUser(testbed(), "admin", OWN_NS, args, input);
    const config = {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: "config-alpha-here", namespace: OWN_NS, labels: labels("alpha") },
      data: { setting: "alpha-config-value" },
    };
    expect(kubectlUser(testbed(), "admin", "default", ["create", "namespace", OWN_NS]).code).toBe(0);
    try {
      expect(admin(["apply", "-f", "-"], stringify(config)).code).toBe(0);
      for (const [name, role] of [
        ["bob-view", "view"],
        ["bob-override", "svc-compartment-override"],
      ])
        expect(
          admin(["create", "rolebinding", name as string, `--clusterrole=${role}`, "--user=bob"]).code,
        ).toBe(0);
      expect(
        svc("bob", [
          "context",
          "create",
          "uk-s-bravo",
          "--country=UK",
          "--sensitivity=S",
          "--compartment=BRAVO",
          `--kube-context=${testbed().kube.users.bob.context}`,
          `--namespace=${OWN_NS}`,
        ]).code,
      ).toBe(0);
      expect(svc("bob", ["context", "use", "uk-s-bravo"]).code).toBe(0);
      const read = ["get", "configmap", "config-alpha-here", "-o", "jsonpath={.data.setting}"];
      const r = svc("bob", [...read, "--force"]);
      expect({ code: r.code, out: r.out }).toEqual({ code: 0, out: "alpha-config-value" });
      expect(r.err).toContain(
        "--force: get of configmap/config-alpha-here of compartment US-TS-ALPHA from UK-S-BRAVO",
      );
      // Plain kubectl: the webhook finds the same grant.
      expect(kubectlUser(testbed(), "bob", OWN_NS, read).out).toBe("alpha-config-value");
    } finally {
      kubectlUser(testbed(), "admin", "default", ["delete", "namespace", OWN_NS, "--timeout=25s"]);
    }
  });
});
