import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import {
  clearancesOf,
  contextClearances,
  judgeMarks,
  SPEAKS_FOR,
  spokenGroups,
} from "../../lib/kube/clearance.ts";
import type { Marks } from "../../lib/kube/mls.ts";
import type { AccessDeps } from "../../proxy/admission/access.ts";
import { type AccessReviewSpec, decideRead, guardedRead } from "../../proxy/admission/authorize.ts";

/**
 * The authorization webhook's decision on one SubjectAccessReview (docs/admission.md, "Reads"): named
 * reads of Secrets, ConfigMaps and pod logs by the clearance rule; no opinion for everything else. The
 * marks come from a table standing in for the watch cache.
 */
const ALICE = ["svc:country:us", "svc:sensitivity:ts", "svc:compartment:alpha"];
const m = (compartment?: string, level?: string, compartmentNote?: string): Marks => ({
  compartment,
  level,
  compartmentNote,
});
const objects: Record<string, Marks> = {
  "secrets/s-alpha": m("US-TS-ALPHA"),
  "secrets/s-bravo": m("UK-S-BRAVO"),
  "secrets/s-none": m(),
  "secrets/s-bad": m("BRAVO"),
  "secrets/__proto__": m("UK-S-BRAVO"),
  "configmaps/cm-bravo": m(undefined, undefined, "uk:bravo"),
  "configmaps/cm-clash": m("US-TS-ALPHA", undefined, "uk:bravo"),
  "pods/p-alpha": m("US-TS-ALPHA"),
  "pods/p-bravo": m("UK-S-BRAVO"),
  "serviceaccounts/sa-alpha": m("US-TS-ALPHA"),
  "serviceaccounts/sa-bravo": m("UK-S-BRAVO"),
  "serviceaccounts/deployer": m("US-TS-ALPHA"),
  "serviceaccounts/plain": m(),
  "serviceaccounts/sa-odd": m("US-TS-ALPHA", undefined, "uk:bravo"),
  "pods/p-none": m(),
};
const deps = (
  o: { unlabeled?: "allow" | "deny"; overrides?: string[] } = {},
): AccessDeps & { asked: string[] } => {
  const asked: string[] = [];
  return {
    asked,
    targetMarks: async (kind, _ns, name) => {
      asked.push(`${kind}/${name}`);
      const found = Object.hasOwn(objects, `${kind}/${name}`) ? objects[`${kind}/${name}`] : undefined;
      return found ? [found] : null;
    },
    // Every object's UID is "uid-" and its name.
    entry: async (kind, _ns, name) => {
      const found = Object.hasOwn(objects, `${kind}/${name}`) ? objects[`${kind}/${name}`] : undefined;
      return found ? { ...found, uid: `uid-${name}` } : null;
    },
    canOverride: async (u) =>
      [...(o.overrides ?? []), "system:serviceaccount:shared:deployer"].includes(u.username ?? ""),
    unlabeled: o.unlabeled ?? "deny",
  };
};
const read = (
  resource: string,
  name: string | undefined,
  o: { verb?: string; subresource?: string; group?: string; user?: string; groups?: unknown } = {},
): AccessReviewSpec =>
  ({
    resourceAttributes: {
      namespace: "shared",
      verb: o.verb ?? "get",
      group: o.group ?? "",
      resource,
      ...(o.subresource ? { subresource: o.subresource } : {}),
      ...(name !== undefined ? { name } : {}),
    },
    user: o.user ?? "alice",
    groups: o.groups ?? ALICE,
  }) as AccessReviewSpec;

describe("the authorization webhook's decision", () => {
  test("another compartment's Secret, ConfigMap or pod log is denied by name, for get, list and watch", async () => {
    for (const [spec, words] of [
      [read("secrets", "s-bravo"), "Cannot read secret in another compartment (UK-S-BRAVO)"],
      [read("secrets", "s-bravo", { verb: "watch" }), "Cannot read secret in another compartment"],
      [read("secrets", "s-bravo", { verb: "list" }), "Cannot read secret in another compartment"],
      [read("configmaps", "cm-bravo"), "Cannot read config map in another compartment (uk:bravo)"],
      [read("pods", "p-bravo", { subresource: "log" }), "Cannot read the logs of pod in another compartment"],
      [read("secrets", "__proto__"), "Cannot read secret in another compartment"],
    ] as const) {
      const v = await decideRead(spec, deps());
      expect({ spec, decision: v.decision }).toEqual({ spec, decision: "refused" });
      expect(v.message).toContain(words);
    }
  });

  test("one's own compartment gets no opinion from the clearance (RBAC decides)", async () => {
    const v = await decideRead(read("secrets", "s-alpha"), deps());
    expect(v).toMatchObject({ allowed: true, decision: "allowed" });
    expect((await decideRead(read("pods", "p-alpha", { subresource: "log" }), deps())).decision).toBe(
      "allowed",
    );
  });

  test("unreadable or disagreeing marks are denied; an unmarked object follows the unlabeled rule", async () => {
    expect((await decideRead(read("secrets", "s-bad"), deps())).decision).toBe("refused");
    expect((await decideRead(read("configmaps", "cm-clash"), deps())).decision).toBe("refused");
    expect((await decideRead(read("secrets", "s-none"), deps())).decision).toBe("unlabeled");
    expect((await decideRead(read("secrets", "s-none"), deps({ unlabeled: "allow" }))).decision).toBe(
      "unlabeled",
    );
    expect((await decideRead(read("secrets", "s-none"), deps({ unlabeled: "allow" }))).message).toContain(
      "has no compartment label",
    );
  });

  test("an override holder passes, as an override", async () => {
    const v = await decideRead(read("secrets", "s-bravo"), deps({ overrides: ["alice"] }));
    expect(v).toMatchObject({ allowed: true, decision: "override" });
  });

  test("what the webhook does not decide gets no opinion, without a lookup", async () => {
    const d = deps();
    for (const spec of [
      read("secrets", undefined, { verb: "list" }), // a whole namespace
      read("secrets", ""),
      read("secrets", "s-bravo", { verb: "update" }),
      read("secrets", "s-bravo", { verb: "delete" }),
      read("secrets", "s-bravo", { group: "example.com" }),
      read("pods", "p-bravo"), // the pod itself: no data
      read("pods", "p-bravo", { subresource: "exec" }),
      read("deployments", "d-bravo"),
      read("secrets", "s-bravo", { user: "system:kube-controller-manager", groups: [] }),
      read("secrets", "s-bravo", { user: "system:node:kwok-node-0", groups: ["system:nodes"] }),
      {
        user: "alice",
        groups: ALICE,
        nonResourceAttributes: { path: "/healthz", verb: "get" },
      } as AccessReviewSpec,
      {} as AccessReviewSpec,
    ]) {
      const v = await decideRead(spec, d);
      expect({ spec, decision: v.decision }).toEqual({ spec, decision: "no_opinion" });
    }
    expect(d.asked).toEqual([]);
  });

  test("a read of an object that does not exist gets no opinion (the API server answers 404)", async () => {
    expect((await decideRead(read("secrets", "missing"), deps())).decision).toBe("no_opinion");
  });

  test("fields of the wrong type from a caller are not read as a request", async () => {
    const odd = {
      resourceAttributes: { namespace: ["shared"], verb: "get", resource: "secrets", name: { x: 1 } },
    };
    expect((await decideRead(odd as unknown as AccessReviewSpec, deps())).decision).toBe("no_opinion");
    expect(
      guardedRead({ resourceAttributes: { verb: "get", resource: "secrets", subresource: "x" } }),
    ).toBeUndefined();
    expect(guardedRead({ resourceAttributes: { verb: "get", resource: "secrets" } })).toBe("secrets/");
    // Groups that are not a list are no clearances: a BRAVO secret is denied.
    const v = await decideRead(read("secrets", "s-bravo", { groups: "svc:compartment:bravo" }), deps());
    expect(v.decision).toBe("refused");
  });
});

describe("one clearance rule for svc and the cluster (lib/kube/clearance.ts)", () => {
  test("a context and the groups of the same clearances clear the same marks", async () => {
    const context = { country: "US", sensitivity: "TS", compartment: "ALPHA" };
    const groups = ["svc:country:us", "svc:sensitivity:ts", "svc:compartment:alpha"];
    const table: [Marks, boolean][] = [
      [m("US-TS-ALPHA"), true],
      [m("US-S-ALPHA"), true], // a lower sensitivity of the same compartment
      [m("us-u-alpha"), true],
      [m("UK-S-BRAVO"), false],
      [m("US-TS-BRAVO"), false],
      [m("GB-TS-ALPHA"), false],
      [m(undefined, "us:s"), true],
      [m(undefined, undefined, "us:bravo"), false],
      [m("US-TS-ALPHA", undefined, "us:bravo"), false], // marks that disagree
      [m("ALPHA"), false], // unreadable
      [m(), false], // unlabeled
    ];
    for (const [marks, cleared] of table) {
      const svc = judgeMarks(contextClearances(context), [marks]).kind === "cleared";
      const cluster = judgeMarks(clearancesOf(groups), [marks]).kind === "cleared";
      expect({ marks, svc, cluster }).toEqual({ marks, svc: cleared, cluster: cleared });
    }
  });
});

describe("impersonation of service accounts", () => {
  const as = (name: string, user = "alice") => read("serviceaccounts", name, { verb: "impersonate", user });

  test("another compartment's account is denied, one that does not exist too", async () => {
    const bravo = await decideRead(as("sa-bravo"), deps());
    expect(bravo.decision).toBe("refused");
    expect(bravo.message).toContain("Cannot impersonate service account in another compartment (UK-S-BRAVO)");
    const gone = await decideRead(as("sa-gone"), deps());
    expect(gone.decision).toBe("refused");
    expect(gone.message).toContain("service account shared/sa-gone not found");
  });

  test("one's own compartment's account gets no denial, unless it holds the override", async () => {
    expect((await decideRead(as("sa-alpha"), deps())).decision).toBe("allowed");
    const lent = await decideRead(as("deployer"), deps());
    expect(lent.decision).toBe("refused");
    expect(lent.message).toContain("it holds the compartment override");
    expect((await decideRead(as("deployer", "olivia"), deps({ overrides: ["olivia"] }))).decision).toBe(
      "override",
    );
  });

  test("impersonating users, groups or accounts' subresources is not decided here", async () => {
    expect(guardedRead(read("users", "bob", { verb: "impersonate" }))).toBeUndefined();
    expect(
      guardedRead(read("serviceaccounts", "x", { verb: "impersonate", subresource: "token" })),
    ).toBeUndefined();
    expect(guardedRead(read("serviceaccounts", "x", { verb: "impersonate", group: "apps" }))).toBeUndefined();
    expect(guardedRead(as("x"))).toBe("serviceaccounts/impersonate");
  });
});

describe("which compartment a requester speaks for (identity.ts)", () => {
  const SA = (name: string) => `system:serviceaccount:shared:${name}`;
  const bound = (pod: unknown, uid: unknown) => ({
    "authentication.kubernetes.io/pod-name": pod,
    "authentication.kubernetes.io/pod-uid": uid,
  });
  const asks = (user: string, o: { groups?: unknown; extra?: unknown } = {}): AccessReviewSpec =>
    ({
      resourceAttributes: { verb: "get", group: "svc.dev", resource: "compartmentclearances" },
      user,
      groups: o.groups ?? ["system:serviceaccounts", "system:authenticated"],
      ...(o.extra !== undefined ? { extra: o.extra } : {}),
    }) as AccessReviewSpec;
  const ALPHA_ANSWER = "svc-compartments speaks for: svc:country:us svc:sensitivity:ts svc:compartment:alpha";

  test("a marked account speaks for its marks; a token bound to a pod for that pod's", async () => {
    expect(await decideRead(asks(SA("sa-alpha")), deps())).toEqual({
      decision: "speaks_for",
      message: ALPHA_ANSWER,
    });
    // An unmarked account (default, say) in a pod of ALPHA: the pod's token speaks for ALPHA.
    const plainInAlpha = asks(SA("plain"), { extra: bound(["p-alpha"], ["uid-p-alpha"]) });
    expect((await decideRead(plainInAlpha, deps())).message).toBe(ALPHA_ANSWER);
    const alphaInAlpha = asks(SA("sa-alpha"), { extra: bound(["p-alpha"], ["uid-p-alpha"]) });
    expect((await decideRead(alphaInAlpha, deps())).message).toBe(ALPHA_ANSWER);
    // A person: their svc: groups.
    expect((await decideRead(asks("alice", { groups: ALICE }), deps())).message).toBe(ALPHA_ANSWER);
  });

  test("what cannot be told speaks for no compartment, and says why", async () => {
    for (const [spec, why] of [
      [asks(SA("plain")), "service account shared/plain has no compartment marks"],
      [asks(SA("sa-gone")), "service account shared/sa-gone does not exist"],
      [asks(SA("__proto__")), "service account shared/__proto__ does not exist"],
      [asks("system:serviceaccount:shared:a:b", { groups: ALICE }), "is not a service account's name"],
      [asks("system:serviceaccount:shared", { groups: ALICE }), "is not a service account's name"],
      [asks(SA("sa-odd")), "marks svc cannot read"],
      // Impersonated groups on an account are not read.
      [asks(SA("plain"), { groups: ALICE }), "has no compartment marks"],
      [
        asks(SA("plain"), { extra: bound(["p-alpha"], ["uid-other"]) }),
        "pod shared/p-alpha of UID uid-other is gone",
      ],
      [asks(SA("plain"), { extra: bound(["p-gone"], ["uid-p-gone"]) }), "is gone"],
      [asks(SA("plain"), { extra: bound(["p-none"], ["uid-p-none"]) }), "has no compartment marks"],
      [
        asks(SA("plain"), { extra: { "authentication.kubernetes.io/pod-name": ["p-alpha"] } }),
        "by name alone",
      ],
      [asks(SA("plain"), { extra: bound(["p-alpha", "p-bravo"], ["uid-p-alpha"]) }), "by UID alone"],
      [asks(SA("plain"), { extra: bound("p-alpha", "uid-p-alpha") }), "names its pod by"],
      // A marked account in a pod of another compartment: neither is trusted.
      [asks(SA("sa-bravo"), { extra: bound(["p-alpha"], ["uid-p-alpha"]) }), "are of different compartments"],
      [
        asks("carol", { groups: ["system:authenticated"] }),
        "carol speaks for no compartment: it holds no svc: groups",
      ],
    ] as const) {
      const v = await decideRead(spec, deps());
      expect({ spec, decision: v.decision }).toEqual({ spec, decision: "refused" });
      expect(v.message).toContain(why);
    }
  });

  test("the policy reads the answer by the prefix the webhook writes", () => {
    const policy = readFileSync(new URL("../../deploy/admission/base/policy.yaml", import.meta.url), "utf8");
    expect(policy).toContain(`reason().startsWith('${SPEAKS_FOR}')`);
    expect(policy).toContain(`reason().substring(${SPEAKS_FOR.length}).split(' ')`);
    // svc identity reads it back the same way.
    expect(spokenGroups(ALPHA_ANSWER)).toEqual(ALICE);
    expect(spokenGroups("svc-compartments: shared:plain speaks for no compartment")).toBeUndefined();
  });

  test("the control plane and other questions of svc.dev get no opinion", async () => {
    const cm = asks("system:kube-controller-manager", { groups: [] });
    expect((await decideRead(cm, deps())).decision).toBe("no_opinion");
    const other = {
      ...asks(SA("sa-alpha")),
      resourceAttributes: { verb: "list", group: "svc.dev", resource: "compartmentclearances" },
    };
    expect((await decideRead(other, deps())).decision).toBe("no_opinion");
  });

  test("an account's reads are judged by what it speaks for", async () => {
    const own = read("secrets", "s-alpha", { user: SA("sa-alpha"), groups: [] });
    expect((await decideRead(own, deps())).decision).toBe("allowed");
    const other = await decideRead(read("secrets", "s-bravo", { user: SA("sa-alpha"), groups: [] }), deps());
    expect(other.decision).toBe("refused");
    expect(other.message).toContain("(service account shared/sa-alpha is of US-TS-ALPHA)");
    const plain = await decideRead(read("secrets", "s-alpha", { user: SA("plain"), groups: ALICE }), deps());
    expect(plain.decision).toBe("refused");
  });
});
