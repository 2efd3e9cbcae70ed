import { describe, expect, test } from "bun:test";
import { execTarget, withoutForce } from "../../lib/kube/exec-args.ts";

describe("kubectl exec arguments", () => {
  test("the target is the first positional that is not a flag's value", () => {
    expect(execTarget(["exec", "web-0", "--", "ls"])).toBe("web-0");
    expect(execTarget(["exec", "-it", "-c", "app", "-n", "alpha", "pod/web-0", "--", "sh"])).toBe(
      "pod/web-0",
    );
    expect(execTarget(["exec", "--container=app", "deploy/web", "--", "sh"])).toBe("deploy/web");
    expect(execTarget(["exec", "-i", "--", "ls"])).toBeUndefined();
  });
  test("--force is svc's and is removed; a --force after -- belongs to the command", () => {
    expect(withoutForce(["exec", "--force", "p", "--", "rm", "--force"])).toEqual({
      args: ["exec", "p", "--", "rm", "--force"],
      force: true,
    });
    expect(withoutForce(["exec", "p", "--", "rm", "--force"]).force).toBe(false);
  });
});
