import { describe, expect, test } from "bun:test";
import { guardDelete } from "../../cmd/svc/guards/delete.ts";
import type { GuardInput } from "../../cmd/svc/guards/guard.ts";
import { readLine } from "../../cmd/svc/line.ts";
import type { ActiveContext } from "../../lib/config/resolve.ts";
import { getArgs } from "../../lib/kube/get-args.ts";
import type { Lookup } from "../../lib/kube/lookup.ts";
import { readRawPath, refuseRawIntoPods } from "../../lib/kube/raw-path.ts";

/**
 * `--raw` as kubectl sends it and the API server reads it (lib/kube/raw-path.ts): the segments the
 * server sees, what svc refuses because it reaches into a pod, and what svc refuses because it cannot
 * read it exactly.
 */
const CUR = "US-TS-ALPHA";
const INTO = "svc does not pass raw requests into pods, services or nodes";

describe("ordinary paths pass, read as the API server reads them", () => {
  test.each([
    ["/api/v1/namespaces/alpha/pods", ["api", "v1", "namespaces", "alpha", "pods"]],
    ["/readyz", ["readyz"]],
    ["/readyz/", ["readyz"]],
    ["/", []],
    ["/apis/apps/v1/deployments?limit=5", ["apis", "apps", "v1", "deployments"]],
    ["/metrics?", ["metrics"]],
    [
      "/api/v1/namespaces/alpha/pods/web-0/log?container=c",
      ["api", "v1", "namespaces", "alpha", "pods", "web-0", "log"],
    ],
    ["/.well-known/openid-configuration", [".well-known", "openid-configuration"]],
    ["/openapi/v3/apis/apps/v1?hash=AB12", ["openapi", "v3", "apis", "apps", "v1"]],
    ["/apis/metrics.k8s.io/v1beta1/nodes", ["apis", "metrics.k8s.io", "v1beta1", "nodes"]],
    ["/livez/poststarthook/start-informers", ["livez", "poststarthook", "start-informers"]],
    // The query is the query: a `/exec` or an escape in it is no path segment.
    ["/api/v1/namespaces/alpha/pods?fieldSelector=a/exec", ["api", "v1", "namespaces", "alpha", "pods"]],
    [
      "/api/v1/namespaces/alpha/pods?labelSelector=a%3Db%2Fexec",
      ["api", "v1", "namespaces", "alpha", "pods"],
    ],
    // Escapes are decoded once, as kubectl decodes them before it sends the path.
    ["/api/v1/namespaces/alpha/configmaps/a%2Db", ["api", "v1", "namespaces", "alpha", "configmaps", "a-b"]],
    ["/api/v1/namespaces/alpha/pods%2Fweb-0", ["api", "v1", "namespaces", "alpha", "pods", "web-0"]],
    ["/api/v1/namespaces/alpha/pods%2fweb-0", ["api", "v1", "namespaces", "alpha", "pods", "web-0"]],
    ["/api/v1/%6Eamespaces/alpha", ["api", "v1", "namespaces", "alpha"]],
  ])("%s", (value, segments) => {
    expect(readRawPath(value).segments).toEqual(segments);
    expect(() => refuseRawIntoPods("get", value)).not.toThrow();
  });
});

describe("paths into a pod, a service or a node are refused, however they are written", () => {
  test.each([
    "/api/v1/namespaces/bravo/pods/x/exec",
    "/api/v1/namespaces/bravo/pods/x/exec?command=ls&stdout=1",
    "/api/v1/namespaces/bravo/pods/x/exec/",
    "/api/v1/namespaces/bravo/pods/x/attach",
    "/api/v1/namespaces/bravo/pods/x/portforward",
    "/api/v1/namespaces/bravo/pods/x/proxy/",
    "/api/v1/namespaces/bravo/pods/x:8080/proxy/metrics",
    "/api/v1/namespaces/bravo/services/https:web:443/proxy/",
    "/api/v1/nodes/n1/proxy/logs/",
    "/api/v1/proxy/namespaces/bravo/pods/x/",
    // percent-encoded letters
    "/api/v1/namespaces/bravo/pods/x/%65xec",
    "/api/v1/namespaces/bravo/pods/x/%65%78%65%63",
    "/api/v1/namespaces/bravo/pods/x/%70roxy/",
    "/api/v1/namespaces/bravo/pods/x/%61ttach",
    // an encoded slash is a slash to the API server: kubectl decodes it before it sends the path
    "/api/v1/namespaces/bravo/pods/x%2Fexec",
    "/api/v1/namespaces/bravo/pods/x%2fexec",
    "/api/v1/namespaces/bravo/pods%2Fx%2Fexec",
    "/api/v1/namespaces/bravo/pods/x%2Fportforward?ports=80",
  ])("%s", (value) => {
    expect(() => refuseRawIntoPods("get", value)).toThrow(INTO);
    expect(() => refuseRawIntoPods("get", value)).toThrow(`--raw ${JSON.stringify(value)}`);
  });

  test("an exact reading: the subresource names are case-sensitive, as the API server's", () => {
    expect(readRawPath("/api/v1/namespaces/alpha/pods/x/EXEC").segments.at(-1)).toBe("EXEC");
    expect(() => refuseRawIntoPods("get", "/api/v1/namespaces/alpha/pods/x/EXEC")).not.toThrow();
  });

  test("the refusal shows the path as the API server would read it when it was written otherwise", () => {
    expect(() => refuseRawIntoPods("get", "/api/v1/namespaces/bravo/pods/x/%65xec")).toThrow(
      "(read as /api/v1/namespaces/bravo/pods/x/exec)",
    );
  });
});

describe("what svc cannot read exactly is refused (fail closed)", () => {
  test.each([
    // dot segments: kubectl 1.33 and older send them as written, 1.34 and newer resolve them
    ["/api/v1/namespaces/bravo/pods/x/foo/../exec", "a . or .. segment"],
    ["/api/v1/namespaces/bravo/pods/x/./exec", "a . or .. segment"],
    ["/api/v1/namespaces/bravo/pods/x/exec/.", "a . or .. segment"],
    ["/api/v1/namespaces/alpha/pods/../../bravo/pods/x/exec", "a . or .. segment"],
    ["/api/v1/namespaces/bravo/pods/x/foo/%2e%2e/exec", "a . or .. segment"],
    ["/api/v1/namespaces/bravo/pods/x/foo/.%2E/exec", "a . or .. segment"],
    ["/api/v1/namespaces/bravo/pods/x/%2E/exec", "a . or .. segment"],
    ["/..", "a . or .. segment"],
    // empty segments: sent as written by kubectl 1.33 and older, merged by 1.34 and newer
    ["/api/v1/namespaces/bravo/pods/x//exec", "an empty segment"],
    ["/api/v1/namespaces/bravo/pods/x/%2F/exec", "an empty segment"],
    ["/api/v1/namespaces/bravo/pods/x%2F%2Fexec", "an empty segment"],
    ["/api/v1/namespaces/bravo/pods/x/exec//", "an empty segment"],
    ["/api//v1", "an empty segment"],
    // not an absolute path: kubectl reads a host after //, drops a scheme's host, refuses the rest
    ["//api/v1/namespaces/bravo/pods/x/exec", "a host name"],
    ["///api/v1/namespaces/bravo/pods/x/exec", "a host name"],
    ["http://evil/api/v1/namespaces/bravo/pods/x/exec", "not an absolute path"],
    ["https:/api/v1/namespaces/bravo/pods/x/exec", "not an absolute path"],
    ["api/v1/namespaces/bravo/pods/x/exec", "not an absolute path"],
    ["?/api/v1", "not an absolute path"],
    ["*", "not an absolute path"],
    ["", "not an absolute path"],
    // a fragment is not sent
    ["/api/v1/namespaces/bravo/pods/x/exec#top", "a fragment"],
    ["/api/v1/namespaces/alpha/pods#/../../bravo/pods/x/exec", "a fragment"],
    ["/api/v1/namespaces/alpha/pods?limit=1#x", "a fragment"],
    // percent escapes that are not two hexadecimal digits
    ["/api/v1/namespaces/bravo/pods/x/%zzexec", 'an invalid percent escape "%zz"'],
    ["/api/v1/namespaces/bravo/pods/x/exec%", 'an invalid percent escape "%"'],
    ["/api/v1/namespaces/bravo/pods/x/exec%6", 'an invalid percent escape "%6"'],
    ["/api/v1/namespaces/bravo/pods/x/%6gxec", 'an invalid percent escape "%6g"'],
    // encoded twice: decoded once it still holds a %, which something after the API server might decode
    ["/api/v1/namespaces/bravo/pods/x/%2565xec", 'holds "%"'],
    ["/api/v1/namespaces/bravo/pods/x%252Fexec", 'holds "%"'],
    // ; (path parameters to some proxies), \ (a slash to some proxies), and what is never in a path
    ["/api/v1/namespaces/bravo/pods/x/exec;x=1", 'holds ";"'],
    ["/api/v1/namespaces/bravo/pods/x/exec%3Bx", 'holds ";"'],
    ["/api/v1/namespaces/bravo/pods/x/exec\\", 'holds "\\\\"'],
    ["/api/v1/namespaces/bravo/pods/x%5Cexec", 'holds "\\\\"'],
    ["/api/v1/namespaces/bravo/pods/x/exec%3Fcommand=ls", 'holds "?"'],
    ["/api/v1/namespaces/bravo/pods/x/exec%23", 'holds "#"'],
    ["/api/v1/namespaces/bravo/pods/x/ex ec", "not printable ASCII"],
    ["/api/v1/namespaces/bravo/pods/x/ex%20ec", "not printable ASCII"],
    ["/api/v1/namespaces/bravo/pods/x/exec%00", "not printable ASCII"],
    ["/api/v1/namespaces/bravo/pods/x/exec%0A", "not printable ASCII"],
    ["/api/v1/namespaces/bravo/pods/x/exec%7F", "not printable ASCII"],
    ["/api/v1/namespaces/bravo/pods/x/%C3%A9", "not printable ASCII"],
    ["/api/v1/namespaces/bravo/pods/x/%FF", "not printable ASCII"],
    ["/api/v1/namespaces/bravo/pods/x/é", "not printable ASCII"],
    // control characters, which kubectl refuses
    ["/api/v1/namespaces/bravo/pods/x/exec\n", "a control character"],
    ["/api/v1/namespaces/bravo/pods/x/\texec", "a control character"],
    ["/api/v1/namespaces/bravo/pods/x/exec\u0000", "a control character"],
    ["/api/v1/namespaces/bravo/pods/x/exec\u007f", "a control character"],
    ["/api/v1/namespaces/alpha/pods?limit=1\r\nX: y", "a control character"],
  ])("%j", (value, why) => {
    for (const read of [() => readRawPath(value), () => refuseRawIntoPods("get", value)]) {
      expect(read).toThrow(`--raw ${JSON.stringify(value)}: `);
      expect(read).toThrow(why);
      expect(read).toThrow("write the path plainly, as in /api/v1/namespaces/NAMESPACE/pods");
    }
  });
});

describe("every command that takes --raw", () => {
  const get =
    (...args: string[]) =>
    () =>
      getArgs(readLine(["get", ...args]), CUR);
  test("get: into a pod refused, unreadable refused, ordinary passed to kubectl unchanged", () => {
    expect(get("--raw", "/api/v1/namespaces/bravo/pods/x/%65xec")).toThrow(INTO);
    expect(get("--raw=/api/v1/namespaces/bravo/pods/x/foo/../exec")).toThrow("a . or .. segment");
    expect(get("--raw", "/api/v1/namespaces/alpha/pods", "--raw", "/x/exec")).toThrow(INTO);
    expect(get("--raw", "/apis/apps/v1/deployments?limit=5")()).toEqual([
      "--raw",
      "/apis/apps/v1/deployments?limit=5",
    ]);
    // An empty --raw is no --raw to kubectl either: an ordinary get.
    expect(get("pods", "--raw=")()).toEqual(["pods", "--raw=", "--label-columns=svc.io/compartment"]);
  });

  const deleting = (args: string[]) => {
    const input: GuardInput = {
      line: readLine(["delete", ...args]),
      active: { label: CUR } as ActiveContext,
      lookup: {
        objects: () => {
          throw new Error("no selection");
        },
      } as unknown as Lookup,
      targets: [],
      own: new Set(),
    };
    return () => guardDelete(input);
  };
  test("delete: a DELETE through a pod's, service's or node's proxy is refused, --force or not", async () => {
    await expect(deleting(["--raw", "/api/v1/namespaces/bravo/pods/x/proxy/data"])()).rejects.toThrow(INTO);
    await expect(
      deleting(["--raw", "/api/v1/namespaces/bravo/pods/x/%70roxy/data", "--force"])(),
    ).rejects.toThrow(INTO);
    await expect(deleting(["--raw=/api/v1/namespaces/bravo/services/s/proxy/../x"])()).rejects.toThrow(
      "a . or .. segment",
    );
    expect(await deleting(["--raw", "/api/v1/namespaces/alpha/configmaps/c"])()).toEqual({});
  });
});
