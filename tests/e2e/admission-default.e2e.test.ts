import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { COMPARTMENT_LABEL as PIN } from "../../lib/kube/mls.ts";
import { compiled } from "../support/compiled.ts";
import { ROOT } from "../support/proc.ts";
import { waitUntil } from "../support/wait.ts";
import { KINDS, NOT_STORED } from "./admission-kinds.ts";
import {
  ALPHA,
  auditSince,
  auditSize,
  BRAVO,
  createContexts,
  kubectlUser,
  marked,
  useTestbed,
} from "./support.ts";
import type { KubeState } from "./testbed/kube.ts";
import { clientKubeconfig, NODE } from "./testbed/kube.ts";

/**
 * Compartments hold by default (docs/admission.md, "Threat model"): with plain kubectl as the test bed's
 * users, in namespace `shared`, where alice (ALPHA) and bob (BRAVO) hold the standard `edit` and `admin`
 * roles and only the compartment rules keep them apart. Every namespaced kind those roles grant is
 * created, updated and deleted across compartments and refused, naming both compartments; the same within
 * one compartment, and with olivia's override (recorded in the API server's audit log), passes. Then each
 * class of indirect path: other verbs that answer with the object, impersonation, owners, priority,
 * volumes, autoscalers, exposure, network policies and Pod Security. Objects of BRAVO are made by the
 * admin, as their owners would.
 */
const testbed = useTestbed();
const NS = "shared";

type User = keyof KubeState["users"];
const kubectl = (user: User, args: string[], input?: string) => kubectlUser(testbed(), user, NS, args, input);
const apply = (user: User, o: object, ...flags: string[]) =>
  kubectl(user, ["apply", "-f", "-", ...flags], stringify(o));
const dryRun = (user: User, o: object) =>
  kubectl(user, ["create", "--dry-run=server", "-f", "-"], stringify(o));
const admin = (o: object) => {
  const r = apply("admin", o);
  if (r.code !== 0) throw new Error(`admin apply: ${r.err}`);
};

/** The UID of an object ("kind/name"), read by the admin. */
const uidOf = (what: string) => kubectl("admin", ["get", what, "-o", "jsonpath={.metadata.uid}"]).out;

/** Refused by the cluster, with every text in `texts`. */
const refused = (r: { code: number | null; err: string }, ...texts: string[]) => {
  expect(r.code).not.toBe(0);
  for (const t of texts) expect(r.err).toContain(t);
};
const otherCompartment = `is marked for another compartment (${PIN}=${BRAVO}); you are cleared for compartments alpha`;
/**
 * A refusal naming BRAVO's compartment and alice's: from the policy, or, for a Secret or ConfigMap that
 * kubectl reads first, from the authorization webhook.
 */
const acrossCompartments = (r: { code: number | null; err: string }) =>
  refused(r, "another compartment (", BRAVO, "you are cleared for compartments alpha");

/** For each kind: "bravo-<resource>" made by the admin, and the objects the kinds that name others name. */
const short = (key: string) => key.split("/")[1] as string;
const ref = (c: string) => (c === ALPHA ? "alpha-ref" : "bravo-ref");
const manifest = (key: string, c: string, name = `${c === ALPHA ? "alpha" : "bravo"}-${short(key)}`) =>
  (KINDS[key] as (typeof KINDS)[string])(c, name, ref(c));

beforeAll(async () => {
  // admin too, so that the kinds only it grants (roles, bindings) are tried; edit comes with the test bed.
  admin({
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: { name: "default-admins", labels: { [PIN]: ALPHA } },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "admin" },
    subjects: ["alpha", "bravo"].map((c) => ({
      apiGroup: "rbac.authorization.k8s.io",
      kind: "Group",
      name: `svc:compartment:${c}`,
    })),
  });
  for (const c of [ALPHA, BRAVO]) {
    admin(KINDS["apps/deployments"]?.(c, ref(c), "") as object);
    admin(KINDS["/services"]?.(c, ref(c), "") as object);
  }
  for (const key of Object.keys(KINDS)) admin(manifest(key, BRAVO));
  admin(
    marked("Pod", "bravo-running", BRAVO, {
      spec: { nodeName: NODE, containers: [{ name: "main", image: "busybox" }] },
    }),
  );
  await waitUntil(
    "the BRAVO pod running",
    () =>
      kubectl("admin", ["get", "pod", "bravo-running", "-o", "jsonpath={.status.phase}"]).out === "Running",
  );
});

afterAll(() => {
  // A test bed this file started itself may already be stopped (its hook runs first): nothing to clean.
  try {
    const kinds = Object.keys(KINDS).map((k) =>
      k.startsWith("/") ? short(k) : `${short(k)}.${k.split("/")[0]}`,
    );
    kubectl("admin", ["delete", kinds.join(","), "-l", PIN, "--wait=false", "--ignore-not-found"]);
    kubectl("admin", [
      "delete",
      "priorityclass,persistentvolume",
      "-l",
      "svc-test=default",
      "--ignore-not-found",
    ]);
  } catch {}
});

describe("every kind the edit and admin roles grant is decided by its marks", () => {
  test("the roles on the test bed grant no namespaced kind that has no row", () => {
    const namespaced = new Set(
      kubectl("admin", ["api-resources", "--namespaced=true", "--no-headers", "-o", "name"])
        .out.split("\n")
        .filter(Boolean)
        .map((r) => (r.includes(".") ? `${r.slice(r.indexOf(".") + 1)}/${r.split(".")[0]}` : `/${r}`)),
    );
    const granted = new Set<string>();
    for (const role of ["edit", "admin"]) {
      const rules = JSON.parse(kubectl("admin", ["get", "clusterrole", role, "-o", "json"]).out).rules as {
        apiGroups?: string[];
        resources?: string[];
        verbs: string[];
      }[];
      for (const r of rules)
        if (r.verbs.some((v) => ["create", "update", "patch", "delete", "deletecollection", "*"].includes(v)))
          for (const g of r.apiGroups ?? [])
            for (const res of r.resources ?? [])
              if (!res.includes("/") && namespaced.has(`${g}/${res}`)) granted.add(`${g}/${res}`);
    }
    const covered = new Set([...Object.keys(KINDS), ...Object.keys(NOT_STORED)]);
    expect([...granted].filter((k) => !covered.has(k)).sort()).toEqual([]);
    // Every row is granted by one of the roles (none is stale).
    expect([...covered].filter((k) => !granted.has(k)).sort()).toEqual([]);
  });

  for (const key of Object.keys(KINDS)) {
    test(`${key}: created unmarked or for BRAVO, updated or deleted across compartments: refused; within: passes`, () => {
      // Without the label anywhere: the API server copies a ReplicationController's and a Job's template
      // labels to the object when it has none.
      const unmarked = JSON.parse(JSON.stringify(manifest(key, ALPHA)), (k, v) =>
        k === PIN ? undefined : v,
      );
      refused(
        dryRun("alice", unmarked),
        "carries no compartment mark",
        "you are cleared for compartments alpha",
      );
      refused(
        dryRun("alice", manifest(key, BRAVO, "other")),
        `is marked for another compartment (${PIN}=${BRAVO}`,
      );
      const own = dryRun("alice", manifest(key, ALPHA));
      expect(own.err).toBe("");

      const bravo = `${short(key)}${key.startsWith("/") ? "" : `.${key.split("/")[0]}`}/bravo-${short(key)}`;
      // kubectl reads a Secret or ConfigMap before it changes it: the authorization webhook refuses that.
      const readFirst = key === "/secrets" || key === "/configmaps";
      const del = kubectl("alice", ["delete", bravo, "--dry-run=server"]);
      acrossCompartments(del);
      if (!readFirst)
        expect(del.err).toContain(`${otherCompartment}: you cannot delete it, not even as a dry run`);
      const label = kubectl("alice", ["label", bravo, "x=y", "--dry-run=server"]);
      acrossCompartments(label);
      if (!readFirst) expect(label.err).toContain(`${otherCompartment}: you cannot update it`);
      acrossCompartments(kubectl("alice", ["delete", bravo, "--wait=false"]));
      expect(kubectl("admin", ["get", bravo, "-o", "name"]).code).toBe(0);
      // Within the compartment, and with the override.
      expect(kubectl("bob", ["label", bravo, "x=y", "--dry-run=server"]).err).toBe("");
      expect(kubectl("bob", ["delete", bravo, "--dry-run=server"]).err).toBe("");
      expect(kubectl("olivia", ["delete", bravo, "--dry-run=server"]).err).toBe("");
    });
  }

  test("a question about access is no object: a LocalSubjectAccessReview needs no marks", () => {
    const r = kubectl(
      "alice",
      ["create", "--validate=false", "-f", "-", "-o", "jsonpath={.status.allowed}"],
      stringify({
        apiVersion: "authorization.k8s.io/v1",
        kind: "LocalSubjectAccessReview",
        metadata: { namespace: NS },
        spec: {
          user: "bob",
          groups: ["svc:compartment:bravo"],
          resourceAttributes: { namespace: NS, verb: "get", resource: "pods" },
        },
      }),
    );
    expect(r.err).toBe("");
    expect(r.out).toBe("true");
  });

  test("the override passes, and the API server's audit log records it", async () => {
    const from = auditSize(testbed());
    const r = kubectl("olivia", ["delete", "configmap/bravo-configmaps", "--dry-run=server"]);
    expect(r.err).toBe("");
    const annotated = () =>
      auditSince(testbed(), from).find(
        (e) => e.user.username === "olivia" && e.annotations?.["svc-compartments/override-needed"],
      );
    await waitUntil("the override in the audit log", () => annotated() !== undefined);
    const event = annotated();
    expect(event?.annotations?.["svc-compartments/override-needed"]).toBe(
      "DELETE ConfigMap bravo-configmaps by olivia needs the compartment override",
    );
    expect(event?.responseStatus?.code).toBe(200);
  });
});

describe("verbs that answer with the object", () => {
  test("a dry-run delete or patch of another compartment's Secret prints nothing of it", () => {
    for (const args of [
      // kubectl prints what a raw DELETE answers: the object, on a dry run.
      ["delete", "--raw", `/api/v1/namespaces/${NS}/secrets/bravo-secrets?dryRun=All`],
      [
        "patch",
        "secret",
        "bravo-secrets",
        "--dry-run=server",
        "-o",
        "yaml",
        "-p",
        '{"metadata":{"annotations":{"x":"y"}}}',
      ],
      ["annotate", "secret", "bravo-secrets", "x=y", "--dry-run=server", "-o", "yaml"],
    ]) {
      const r = kubectl("alice", args);
      acrossCompartments(r);
      expect(r.out).toBe("");
    }
  });

  test("a delete of a whole collection deletes nothing of another compartment", () => {
    const r = kubectl("alice", [
      "delete",
      "--raw",
      `/api/v1/namespaces/${NS}/configmaps?labelSelector=${PIN}%3D${BRAVO}`,
    ]);
    refused(r, otherCompartment);
    expect(kubectl("admin", ["get", "configmap", "bravo-configmaps", "-o", "name"]).code).toBe(0);
  });
});

describe("identities", () => {
  test("impersonating another compartment's service account, or one that does not exist, is refused", () => {
    refused(
      kubectl("alice", ["--as=system:serviceaccount:shared:bravo-serviceaccounts", "get", "configmaps"]),
      "Cannot impersonate service account in another compartment (UK-S-BRAVO)",
      "you are cleared for compartments alpha",
    );
    refused(
      kubectl("alice", ["--as=system:serviceaccount:shared:nobody-yet", "get", "configmaps"]),
      "not found",
    );
    expect(
      kubectl("bob", ["--as=system:serviceaccount:shared:bravo-serviceaccounts", "auth", "whoami"]).code,
    ).toBe(0);
  });

  test("an account that holds the override lends it to nobody who does not", () => {
    admin(marked("ServiceAccount", "alpha-deployer", ALPHA));
    admin({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name: "alpha-deployer-override", labels: { [PIN]: ALPHA } },
      roleRef: {
        apiGroup: "rbac.authorization.k8s.io",
        kind: "ClusterRole",
        name: "svc-compartment-override",
      },
      subjects: [{ kind: "ServiceAccount", name: "alpha-deployer", namespace: NS }],
    });
    refused(
      kubectl("alice", ["--as=system:serviceaccount:shared:alpha-deployer", "get", "configmaps"]),
      "it holds the compartment override",
    );
    expect(
      kubectl("olivia", ["--as=system:serviceaccount:shared:alpha-deployer", "auth", "whoami"]).code,
    ).toBe(0);
  });
});

describe("which compartment a service account speaks for", () => {
  let tokens: string;
  /** A kubeconfig holding a new token of `account` alone (the test bed's cluster, no client certificate). */
  const token = (account: string, ...flags: string[]) => {
    const r = kubectl("admin", ["create", "token", account, ...flags]);
    if (r.code !== 0) throw new Error(`create token: ${r.err}`);
    const file = join(tokens, `${account}-${readdirSync(tokens).length}.kubeconfig`);
    const caPem = readFileSync(join(testbed().dir, "ca.pem"), "utf8");
    writeFileSync(file, clientKubeconfig(testbed().kube.apiserver, caPem, r.out.trim()), { mode: 0o600 });
    return file;
  };
  /** kubectl as whoever holds the token of a kubeconfig `token` made. */
  const withToken = (kubeconfig: string, args: string[], input?: string) => {
    const r = Bun.spawnSync(["kubectl", `--kubeconfig=${kubeconfig}`, "-n", NS, ...args], {
      stdin: input ? Buffer.from(input) : "ignore",
      timeout: 30_000,
    });
    return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
  };
  const configMap = (c: string) => stringify(marked("ConfigMap", `written-${c.toLowerCase()}`, c));
  const writes = (t: string, c: string) =>
    withToken(t, ["create", "--dry-run=server", "-o", "name", "-f", "-"], configMap(c));

  /** The flags of `kubectl create token` that bind a token to each pod of the test, by pod. */
  const boundTo: Record<string, string[]> = {};

  beforeAll(() => {
    tokens = mkdtempSync(join(tmpdir(), "svc-tokens-"));
    admin(marked("ServiceAccount", "alpha-writer", ALPHA));
    admin({ apiVersion: "v1", kind: "ServiceAccount", metadata: { name: "plain-writer" } });
    admin({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name: "writers" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "edit" },
      subjects: ["alpha-writer", "plain-writer"].map((name) => ({
        kind: "ServiceAccount",
        name,
        namespace: NS,
      })),
    });
    admin(marked("Secret", "alpha-writer-data", ALPHA, { stringData: { k: "v" } }));
    for (const [c, name] of [
      [ALPHA, "alpha-plain-pod"],
      [BRAVO, "bravo-plain-pod"],
    ] as const)
      admin(
        marked("Pod", name, c, {
          spec: { serviceAccountName: "plain-writer", containers: [{ name: "main", image: "busybox" }] },
        }),
      );
    for (const pod of ["alpha-plain-pod", "bravo-plain-pod"])
      boundTo[pod] = [
        "--bound-object-kind=Pod",
        `--bound-object-name=${pod}`,
        `--bound-object-uid=${uidOf(`pod/${pod}`)}`,
      ];
  });
  afterAll(() => rmSync(tokens, { recursive: true, force: true }));

  test("a marked account writes and reads its own compartment and no other", () => {
    const t = token("alpha-writer");
    expect(writes(t, ALPHA)).toMatchObject({ code: 0, out: "configmap/written-us-ts-alpha\n" });
    refused(
      writes(t, BRAVO),
      `ConfigMap written-uk-s-bravo is marked for another compartment (${PIN}=${BRAVO})`,
      "you are cleared for compartments of shared:alpha-writer's marks",
    );
    expect(withToken(t, ["get", "secret", "alpha-writer-data", "-o", "name"]).code).toBe(0);
    refused(
      withToken(t, ["get", "secret", "bravo-secrets"]),
      `Cannot read secret in another compartment (${BRAVO})`,
      "(service account shared/alpha-writer is of US-TS-ALPHA)",
    );
  });

  test("an unmarked account speaks for its pod's compartment with a token bound to the pod, else for none", () => {
    const inAlpha = token("plain-writer", ...(boundTo["alpha-plain-pod"] as string[]));
    expect(writes(inAlpha, ALPHA).code).toBe(0);
    refused(writes(inAlpha, BRAVO), "is marked for another compartment");
    const inBravo = token("plain-writer", ...(boundTo["bravo-plain-pod"] as string[]));
    expect(writes(inBravo, BRAVO).code).toBe(0);
    refused(writes(inBravo, ALPHA), "is marked for another compartment");
    refused(writes(token("plain-writer"), ALPHA), "is marked for another compartment");
  });

  test("svc identity shows what the account speaks for, as the cluster's webhook answers it", () => {
    const identity = (kubeconfig: string) => {
      const env = { ...process.env, KUBECONFIG: kubeconfig, SVC_CONFIG: `${kubeconfig}.svc.yaml` };
      const svc = (args: string[]) => {
        const r = Bun.spawnSync([compiled("svc"), ...args], { cwd: ROOT, env });
        return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
      };
      expect(createContexts(svc, [["alpha", "ALPHA", "testbed", NS]])).toEqual([0]);
      expect(svc(["context", "use", "alpha"]).code).toBe(0);
      const r = svc(["identity", "-o", "json"]);
      expect(r.code).toBe(0);
      return JSON.parse(r.out).clusterClearances;
    };
    const fromWebhook = "the service account's, from the cluster's compartment webhook";
    expect(identity(token("alpha-writer"))).toMatchObject({
      compartments: ["alpha"],
      countries: ["us"],
      coversActiveCompartment: true,
      basis: fromWebhook,
    });
    expect(identity(token("plain-writer", ...(boundTo["bravo-plain-pod"] as string[])))).toMatchObject({
      compartments: ["bravo"],
      coversActiveCompartment: false,
      basis: fromWebhook,
    });
    const none = identity(token("plain-writer"));
    expect(none).toMatchObject({ compartments: [], coversActiveCompartment: false });
    expect(none.basis).toContain(
      "none: svc-compartments: system:serviceaccount:shared:plain-writer speaks for no compartment",
    );
  });

  test("a token bound to another compartment's pod is refused to whoever asks for it", () => {
    refused(
      kubectl("bob", ["create", "token", "plain-writer", ...(boundTo["alpha-plain-pod"] as string[])]),
      "Cannot request a token of service account shared/plain-writer bound to pod in another compartment (US-TS-ALPHA)",
      "you are cleared for compartments bravo",
    );
    expect(
      kubectl("alice", ["create", "token", "plain-writer", ...(boundTo["alpha-plain-pod"] as string[])]).code,
    ).toBe(0);
  });
});

describe("templates", () => {
  test("a marked Job whose pod template is unmarked is refused: it would make unmarked pods", () => {
    const job = manifest("batch/jobs", ALPHA, "bare-template") as {
      spec: { template: { metadata: { labels: Record<string, string> } } };
    };
    job.spec.template.metadata.labels = { app: "bare" };
    refused(dryRun("alice", job), "has a pod or job template without compartment marks");
  });
});

describe("bindings by name", () => {
  test("a RoleBinding may name only its own compartment's service accounts; a new account cannot take over another's bindings", () => {
    const binding = (name: string, c: string, account: string) => ({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name, labels: { [PIN]: c } },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "view" },
      subjects: [{ kind: "ServiceAccount", name: account, namespace: NS }],
    });
    refused(
      dryRun("alice", binding("grant-bravo", ALPHA, "bravo-serviceaccounts")),
      `names ServiceAccount shared/bravo-serviceaccounts of another compartment (${BRAVO}) (subjects)`,
    );
    expect(dryRun("bob", binding("grant-bravo", BRAVO, "bravo-serviceaccounts")).err).toBe("");
    // BRAVO's account is deleted by its own compartment; its binding stays, naming it.
    admin(binding("bravo-viewers", BRAVO, "bravo-gone"));
    refused(
      dryRun("alice", marked("ServiceAccount", "bravo-gone", ALPHA)),
      `would take the role that RoleBinding shared/bravo-viewers of another compartment (${BRAVO}) grants to its name`,
    );
    expect(dryRun("bob", marked("ServiceAccount", "bravo-gone", BRAVO)).err).toBe("");
  });
});

describe("owners, scheduling, volumes, autoscalers", () => {
  test("an owner of another compartment, or of a kind svc cannot read, is refused on any kind", () => {
    const owned = (owner: object) =>
      dryRun("alice", {
        ...manifest("/configmaps", ALPHA, "owned"),
        metadata: { name: "owned", labels: { [PIN]: ALPHA }, ownerReferences: [owner] },
      });
    refused(
      owned({
        apiVersion: "apps/v1",
        kind: "Deployment",
        name: "bravo-ref",
        uid: uidOf("deployment/bravo-ref"),
      }),
      `cannot be owned by Deployment shared/bravo-ref of another compartment (${BRAVO})`,
    );
    refused(
      owned({ apiVersion: "example.com/v1", kind: "Widget", name: "w", uid: "1" }),
      "svc cannot tell the compartment of a Widget (example.com/v1)",
    );
    expect(
      owned({
        apiVersion: "apps/v1",
        kind: "Deployment",
        name: "alpha-ref",
        uid: uidOf("deployment/alpha-ref"),
      }).err,
    ).toBe("");
  });

  test("a pod may ask only for a priority class of its compartment, or one that never preempts", () => {
    for (const [name, preemption, c] of [
      ["svc-e2e-high", "PreemptLowerPriority", undefined],
      ["svc-e2e-queue", "Never", undefined],
      ["svc-e2e-alpha", "PreemptLowerPriority", ALPHA],
    ] as const)
      admin({
        apiVersion: "scheduling.k8s.io/v1",
        kind: "PriorityClass",
        metadata: { name, labels: { "svc-test": "default", ...(c ? { [PIN]: c } : {}) } },
        value: 1_000_000,
        preemptionPolicy: preemption,
      });
    const pod = (cls: string) =>
      dryRun(
        "alice",
        marked("Pod", "prio", ALPHA, {
          spec: { priorityClassName: cls, containers: [{ name: "m", image: "busybox" }] },
        }),
      );
    refused(
      pod("svc-e2e-high"),
      "names PriorityClass svc-e2e-high of another compartment (no compartment) (priorityClassName)",
    );
    expect(pod("svc-e2e-queue").err).toBe("");
    expect(pod("svc-e2e-alpha").err).toBe("");
  });

  test("a claim binds by name, selects or clones only its own compartment's volumes", () => {
    for (const c of [ALPHA, BRAVO])
      admin({
        apiVersion: "v1",
        kind: "PersistentVolume",
        metadata: { name: `pv-${c.toLowerCase()}`, labels: { "svc-test": "default", [PIN]: c } },
        spec: {
          capacity: { storage: "1Mi" },
          accessModes: ["ReadWriteOnce"],
          hostPath: { path: "/tmp/svc-e2e-pv" },
        },
      });
    const claim = (spec: object) =>
      dryRun(
        "alice",
        marked("PersistentVolumeClaim", "claim", ALPHA, {
          spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Mi" } }, ...spec },
        }),
      );
    refused(
      claim({ volumeName: `pv-${BRAVO.toLowerCase()}` }),
      `names PersistentVolume pv-uk-s-bravo of another compartment (${BRAVO})`,
    );
    refused(
      claim({ selector: { matchLabels: { [PIN]: BRAVO } } }),
      `its selector pins ${PIN}=${BRAVO}`,
      `must include ${PIN}=${ALPHA}`,
    );
    refused(claim({ selector: { matchLabels: { tier: "db" } } }), "does not pin svc.io/compartment");
    refused(
      claim({ dataSource: { kind: "PersistentVolumeClaim", name: "bravo-persistentvolumeclaims" } }),
      `names PersistentVolumeClaim shared/bravo-persistentvolumeclaims of another compartment (${BRAVO}) (spec.dataSource)`,
    );
    expect(claim({ volumeName: `pv-${ALPHA.toLowerCase()}` }).err).toBe("");
    expect(claim({ selector: { matchLabels: { [PIN]: ALPHA } } }).err).toBe("");
  });

  test("a claim template's selector pins its compartment: the claims it makes bind no other's volumes", () => {
    const sts = (selector: object) => {
      const o = manifest("apps/statefulsets", ALPHA, "templated") as { spec: Record<string, unknown> };
      return dryRun("alice", {
        ...o,
        spec: {
          ...o.spec,
          volumeClaimTemplates: [
            {
              metadata: { name: "data", labels: { [PIN]: ALPHA } },
              spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } }, selector },
            },
          ],
        },
      });
    };
    refused(
      sts({ matchLabels: { tier: "db" } }),
      `has a claim template (spec.volumeClaimTemplates[0]) whose selector does not pin svc.io/compartment=${ALPHA}`,
    );
    refused(sts({ matchLabels: { [PIN]: BRAVO } }), `does not pin svc.io/compartment=${ALPHA}`);
    expect(sts({ matchLabels: { [PIN]: ALPHA } }).err).toBe("");
  });

  test("a legacy token Secret may hold a token only of its own compartment's service account", () => {
    const tokenSecret = (c: string, account: string) =>
      dryRun(
        "alice",
        marked("Secret", "grab-token", c, {
          type: "kubernetes.io/service-account-token",
          metadata: {
            name: "grab-token",
            labels: { [PIN]: c },
            annotations: { "kubernetes.io/service-account.name": account },
          },
        }),
      );
    refused(
      tokenSecret(ALPHA, "bravo-serviceaccounts"),
      `names ServiceAccount shared/bravo-serviceaccounts of another compartment (${BRAVO}) (annotation kubernetes.io/service-account.name)`,
    );
    admin(marked("ServiceAccount", "alpha-token-owner", ALPHA));
    expect(tokenSecret(ALPHA, "alpha-token-owner").err).toBe("");
  });

  test("a pod may not mount storage by an address of its own (an NFS export), which Pod Security's baseline allows", () => {
    refused(
      dryRun(
        "alice",
        marked("Pod", "nfs", ALPHA, {
          spec: {
            containers: [{ name: "m", image: "busybox" }],
            volumes: [{ name: "data", nfs: { server: "10.0.0.5", path: "/exports/bravo" } }],
          },
        }),
      ),
      'mounts a nfs volume (volume "data"): svc cannot tell whose storage it reaches',
    );
  });

  test("an autoscaler may scale only its own compartment's workload", () => {
    const hpa = (target: string, apiVersion = "apps/v1", kind = "Deployment") =>
      dryRun("alice", {
        ...manifest("autoscaling/horizontalpodautoscalers", ALPHA, "scaler"),
        spec: { scaleTargetRef: { apiVersion, kind, name: target }, maxReplicas: 5 },
      });
    refused(
      hpa("bravo-ref"),
      `HorizontalPodAutoscaler shared/scaler (${ALPHA}) names Deployment shared/bravo-ref of another compartment (${BRAVO}) (spec.scaleTargetRef)`,
    );
    refused(hpa("not-yet"), "which does not exist: svc cannot tell its compartment; create it first");
    // A kind a controller may serve (a CRD with a scale subresource) that the webhook cannot read.
    refused(
      hpa("alpha-ref", "example.com/v1", "Widget"),
      "names Widget (example.com) shared/alpha-ref (spec.scaleTargetRef): svc cannot tell the compartment of a Widget",
    );
    expect(hpa("alpha-ref").err).toBe("");
  });
});

describe("exposure and network policies", () => {
  test("a Service selecting another compartment's pods, externalIPs, an Ingress to its Service: refused", () => {
    refused(
      dryRun(
        "alice",
        marked("Service", "grab", ALPHA, {
          spec: { selector: { [PIN]: BRAVO }, ports: [{ port: 80 }], type: "NodePort" },
        }),
      ),
      `its selector pins ${PIN}=${BRAVO}`,
    );
    refused(
      dryRun(
        "alice",
        marked("Service", "ext", ALPHA, {
          spec: { selector: { [PIN]: ALPHA }, ports: [{ port: 80 }], externalIPs: ["10.0.0.9"] },
        }),
      ),
      "sets externalIPs",
    );
    expect(
      dryRun(
        "alice",
        marked("Service", "own", ALPHA, {
          spec: { selector: { [PIN]: ALPHA }, ports: [{ port: 80 }], type: "NodePort" },
        }),
      ).err,
    ).toBe("");
    refused(
      dryRun("alice", {
        ...manifest("networking.k8s.io/ingresses", ALPHA, "route"),
        spec: { defaultBackend: { service: { name: "bravo-ref", port: { number: 80 } } } },
      }),
      `names Service shared/bravo-ref of another compartment (${BRAVO}) (spec.defaultBackend)`,
    );
  });

  test("an ExternalName Service, which could send an Ingress to another compartment's Service, is refused", () => {
    refused(
      dryRun(
        "alice",
        marked("Service", "alias", ALPHA, {
          spec: { type: "ExternalName", externalName: `bravo-ref.${NS}.svc.cluster.local` },
        }),
      ),
      "sets externalName",
    );
  });

  test("the service proxy into another compartment's Service is refused", () => {
    refused(
      kubectl("alice", ["get", "--raw", `/api/v1/namespaces/${NS}/services/bravo-ref:80/proxy/`]),
      `Cannot proxy to service in another compartment (${BRAVO})`,
    );
  });

  test("endpoints are the control plane's: a user who may write them is refused", () => {
    admin({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: { name: "endpoint-writers", labels: { [PIN]: ALPHA } },
      rules: [
        { apiGroups: [""], resources: ["endpoints"], verbs: ["create"] },
        { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["create"] },
      ],
    });
    admin({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name: "endpoint-writers", labels: { [PIN]: ALPHA } },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "endpoint-writers" },
      subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: "alice" }],
    });
    refused(
      dryRun(
        "alice",
        marked("Endpoints", "alpha-ref", ALPHA, {
          subsets: [{ addresses: [{ ip: "10.0.0.7" }], ports: [{ port: 80 }] }],
        }),
      ),
      "holds addresses no compartment mark can tell",
    );
    refused(
      dryRun(
        "alice",
        marked(
          "EndpointSlice",
          "alpha-ref-x",
          ALPHA,
          { addressType: "IPv4", endpoints: [{ addresses: ["10.0.0.7"] }] },
          "discovery.k8s.io/v1",
        ),
      ),
      "holds addresses no compartment mark can tell",
    );
  });

  test("the issue's NetworkPolicy and PodDisruptionBudget, and policies that open to another compartment", () => {
    const np = (name: string, c: string | undefined, spec: object) => ({
      apiVersion: "networking.k8s.io/v1",
      kind: "NetworkPolicy",
      metadata: { name, ...(c ? { labels: { [PIN]: c } } : {}) },
      spec,
    });
    const openBravo = {
      podSelector: { matchLabels: { [PIN]: BRAVO } },
      ingress: [{ from: [{ podSelector: { matchLabels: { [PIN]: ALPHA } } }] }],
    };
    refused(apply("alice", np("open-bravo", undefined, openBravo)), "carries no compartment mark");
    refused(apply("alice", np("open-bravo", ALPHA, openBravo)), `its selector pins ${PIN}=${BRAVO}`);
    const own = { matchLabels: { [PIN]: ALPHA } };
    refused(
      dryRun(
        "alice",
        np("from-bravo", ALPHA, {
          podSelector: own,
          ingress: [{ from: [{ podSelector: { matchLabels: { [PIN]: BRAVO } } }] }],
        }),
      ),
      `selects pods of another compartment (${PIN}=${BRAVO}) as a peer; you are cleared for compartments alpha`,
    );
    refused(
      dryRun(
        "alice",
        np("to-all", ALPHA, { podSelector: own, egress: [{ to: [{ namespaceSelector: {} }] }] }),
      ),
      "has a peer that selects pods without pinning svc.io/compartment",
    );
    expect(
      dryRun(
        "alice",
        np("web", ALPHA, { podSelector: own, egress: [{ to: [{ ipBlock: { cidr: "10.0.0.0/8" } }] }] }),
      ).err,
    ).toBe("");
    refused(
      apply("alice", {
        apiVersion: "policy/v1",
        kind: "PodDisruptionBudget",
        metadata: { name: "pin-bravo" },
        spec: { maxUnavailable: 0, selector: { matchLabels: { [PIN]: BRAVO } } },
      }),
      "carries no compartment mark",
    );
    refused(
      dryRun(
        "alice",
        marked(
          "PodDisruptionBudget",
          "pin-bravo",
          ALPHA,
          { spec: { maxUnavailable: 0, selector: { matchLabels: { [PIN]: BRAVO } } } },
          "policy/v1",
        ),
      ),
      `its selector pins ${PIN}=${BRAVO}`,
    );
  });
});

describe("Pod Security", () => {
  test("a privileged pod with a host path, which reads other pods' volumes on its node, is refused", () => {
    refused(
      dryRun(
        "alice",
        marked("Pod", "host", ALPHA, {
          spec: {
            containers: [{ name: "m", image: "busybox", securityContext: { privileged: true } }],
            volumes: [{ name: "pods", hostPath: { path: "/var/lib/kubelet/pods" } }],
          },
        }),
      ),
      'violates PodSecurity "baseline:latest"',
      "privileged",
      "hostPath",
    );
  });
});
