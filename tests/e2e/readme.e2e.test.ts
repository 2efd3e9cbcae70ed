import { afterAll, expect, test } from "bun:test";
import { chmodSync, copyFileSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { compiled } from "../support/compiled.ts";
import { tempDir } from "../support/dev-api.ts";
import { readmeBlock } from "../support/readme.ts";
import { useTestbed } from "./support.ts";

/**
 * README.md's svc quick start, run as written against the test bed's cluster: `svc` on PATH (the
 * compiled dist/svc), a fresh configuration, and a kubeconfig whose current context is the test bed's admin.
 */
const testbed = useTestbed();
const dir = tempDir("svc-readme-");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test("the svc quick start runs as written", () => {
  const bin = join(dir, "bin");
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, "svc"), `#!/bin/sh\nexec ${compiled("svc")} "$@"\n`);
  chmodSync(join(bin, "svc"), 0o755);
  const kubeconfig = join(dir, "kubeconfig");
  copyFileSync(testbed().kube.kubeconfig, kubeconfig);
  Bun.spawnSync(["kubectl", `--kubeconfig=${kubeconfig}`, "config", "use-context", "testbed-admin"]);
  const r = Bun.spawnSync(["bash", "-e", "-c", readmeBlock("svc:")], {
    cwd: dir,
    env: {
      ...process.env,
      PATH: `${bin}:${process.env.PATH}`,
      KUBECONFIG: kubeconfig,
      SVC_CONFIG: join(dir, "config.yaml"),
    },
    timeout: 60_000,
  });
  const out = r.stdout.toString();
  // The test bed's admin holds no clearance groups: svc identity says so, and nothing else is said.
  const said = r.stderr.toString().split("\n").filter(Boolean);
  expect({ code: r.exitCode, said }).toEqual({
    code: 0,
    said: [expect.stringMatching(/^svc: warning: the cluster does not clear you for US-TS-ALPHA/)],
  });
  expect(out).toContain("configmap/hello created");
  expect(out).toMatch(/^hello\s+1\s+\S+\s+US-TS-ALPHA$/m);
  expect(out).toContain("Label:        US-TS-ALPHA");
  expect(out).toContain('configmap "hello" deleted');
}, 90_000);
