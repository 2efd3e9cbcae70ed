import { writeFileSync } from "node:fs";

/** Writes a kubeconfig of one cluster, one user and one current context to `path`, and returns the path. */
export function writeKubeconfig(
  path: string,
  cluster: Record<string, unknown>,
  user: Record<string, unknown> = {},
): string {
  writeFileSync(
    path,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "c", cluster }],
      users: [{ name: "u", user }],
      contexts: [{ name: "x", context: { cluster: "c", user: "u" } }],
      "current-context": "x",
    }),
  );
  return path;
}
