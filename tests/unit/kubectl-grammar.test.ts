import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { kubectlArgs, readLine, svcFlags } from "../../cmd/svc/line.ts";
import {
  commandWords,
  extendGrammar,
  flagSet,
  flagValue,
  flagValues,
  parseCommandLine,
  restWords,
} from "../../lib/kube/grammar.ts";

/** kubectl's grammar as kubectl (cobra + pflag) reads a line: the command wherever the globals stand. */
const parse = (line: string) => parseCommandLine(line.split(" ").filter(Boolean));

describe("finding the command", () => {
  test.each([
    ["exec web-0 -- ls", ["exec"], ["web-0"]],
    ["-n alpha exec other -- ls", ["exec"], ["other"]],
    ["--context prod exec other -- ls", ["exec"], ["other"]],
    ["--kubeconfig /x exec other -- ls", ["exec"], ["other"]],
    ["-nalpha exec other", ["exec"], ["other"]],
    ["--namespace=alpha exec other", ["exec"], ["other"]],
    ["-v 9 exec other", ["exec"], ["other"]],
    ["--insecure-skip-tls-verify exec other", ["exec"], ["other"]],
    ["exec --cache-dir mine other -- ls", ["exec"], ["other"]],
    ["create -n x configmap cm", ["create", "configmap"], ["cm"]],
    ["create cm cm", ["create", "configmap"], ["cm"]],
    ["apply view-last-applied deploy/x", ["apply", "view-last-applied"], ["deploy/x"]],
    ["-n exec exec other", ["exec"], ["other"]],
  ])("%s", (line, path, positionals) => {
    const l = parse(line);
    expect(l.error).toBeUndefined();
    expect(l.plugin).toBe(false);
    expect(l.path).toEqual(path);
    expect(l.positionals).toEqual(positionals);
  });

  test("a first word that is no command is a plugin; nothing after it is kubectl's", () => {
    const l = parse("hello -n x world");
    expect(l.plugin).toBe(true);
    expect(l.path).toEqual([]);
    expect(l.flags).toEqual([]);
  });

  test("cobra assumes an unknown flag before the command takes a value", () => {
    // kubectl finds `other` as the command word here (and fails); svc must not find `exec`.
    expect(parse("--bogus exec other").path).toEqual([]);
  });

  test("the words after -- are not flags and not the command", () => {
    const l = parse("exec p -- exec -n x");
    expect(l.path).toEqual(["exec"]);
    expect(l.rest).toEqual(["exec", "-n", "x"]);
    expect(flagValue(l, "namespace")).toBeUndefined();
  });
});

describe("flags, as pflag reads them", () => {
  test("every form of a value flag gives the same value; the last one wins", () => {
    for (const form of ["-n x", "-nx", "-n=x", "--namespace x", "--namespace=x"])
      expect(flagValue(parse(`get pods ${form}`), "namespace")).toBe("x");
    expect(flagValue(parse("-n a get pods -n b"), "namespace")).toBe("b");
  });

  test("grouped booleans, and a value flag at the end of a group", () => {
    const l = parse("exec -itc app web-0 -- sh");
    expect(flagSet(l, "stdin")).toBe(true);
    expect(flagSet(l, "tty")).toBe(true);
    expect(flagValue(l, "container")).toBe("app");
    expect(l.positionals).toEqual(["web-0"]);
  });

  test("booleans never take the next word; --flag=false turns them off", () => {
    const l = parse("exec --stdin web-0 -- sh");
    expect(l.positionals).toEqual(["web-0"]);
    expect(flagSet(parse("exec --stdin=false web-0"), "stdin")).toBe(false);
    expect(parse("exec --stdin=maybe web-0").error).toContain('invalid argument "maybe"');
  });

  test("optional-value flags take a value only after =", () => {
    const l = parse("apply --dry-run -f m.yaml");
    expect(flagValue(l, "dry-run")).toBe("");
    expect(flagValues(l, "filename")).toEqual(["m.yaml"]);
    expect(flagValue(parse("apply --dry-run=server -fm.yaml"), "dry-run")).toBe("server");
    expect(flagValues(parse("apply -fm.yaml"), "filename")).toEqual(["m.yaml"]);
  });

  test("underscores in long names read as dashes", () => {
    expect(flagValue(parse("get pods --all_namespaces"), "all-namespaces")).toBe("true");
  });

  test("usage errors are kubectl's: unknown flags, missing values, bad syntax", () => {
    expect(parse("exec --bogus web-0").error).toBe("unknown flag: --bogus");
    expect(parse("exec web-0 -Z").error).toContain("unknown shorthand flag: 'Z'");
    expect(parse("get pods -n").error).toContain("flag needs an argument");
    expect(parse("get pods ---x").error).toContain("bad flag syntax");
  });

  test("global flags are marked as such and keep the words they came from", () => {
    const l = parse("--context prod exec -c app web-0");
    const ctx = l.flags.find((f) => f.name === "context");
    expect(ctx).toMatchObject({ value: "prod", global: true, words: [0, 1] });
    expect(l.flags.find((f) => f.name === "container")?.global).toBe(false);
  });

  test("--help is every command's", () => {
    expect(flagSet(parse("apply --help"), "help")).toBe(true);
    expect(flagSet(parse("apply -h"), "help")).toBe(true);
  });
});

describe("svc's own commands and flags", () => {
  const svc = extendGrammar(["version", "identity"], {
    exec: { force: ["b"] },
    "apply edit-last-applied": { force: ["b"] },
  });
  test("own commands replace kubectl's and are found after globals", () => {
    expect(parseCommandLine(["-n", "x", "version"], svc).path).toEqual(["version"]);
    expect(parseCommandLine(["identity"], svc).path).toEqual(["identity"]);
  });
  test("added flags are read like kubectl's and can be removed before kubectl runs", () => {
    const l = parseCommandLine(["exec", "--force=true", "p", "--", "rm", "--force"], svc);
    expect(flagSet(l, "force")).toBe(true);
    expect(restWords(l, new Set(["force"]))).toEqual(["p", "--", "rm", "--force"]);
    expect(commandWords(parseCommandLine(["-n", "x", "create", "cm", "y"], svc))).toEqual(["create", "cm"]);
    const nested = parseCommandLine(["apply", "edit-last-applied", "--force", "x"], svc);
    expect(flagSet(nested, "force")).toBe(true);
    expect(parseCommandLine(["exec", "--force", "p"]).error).toBe("unknown flag: --force");
  });
  test("every command svc makes objects for takes --force, and it is removed before kubectl runs", () => {
    for (const args of [
      ["create", "secret", "generic", "s", "--from-literal=a=b", "--force"],
      ["create", "deployment", "d", "--image=i", "--force"],
      ["create", "configmap", "c", "--force"],
      ["autoscale", "deploy/d", "--max=2", "--force"],
      ["expose", "deploy/d", "--port=80", "--force"],
    ]) {
      const l = readLine(args);
      expect({ args, error: l.error, svc: [...svcFlags(l)] }).toEqual({
        args,
        error: undefined,
        svc: ["force"],
      });
      expect(kubectlArgs(l, { kubeContext: "alpha", namespace: "alpha" }, {}, false)).not.toContain(
        "--force",
      );
    }
  });
  test("names like __proto__ are data", () => {
    expect(parseCommandLine(["__proto__"], svc).plugin).toBe(true);
    expect(parseCommandLine(["toString", "x"], svc).plugin).toBe(true);
    expect(parseCommandLine(["get", "--__proto__"], svc).error).toBe("unknown flag: --__proto__");
  });
});

describe("property: global flags anywhere around a guarded command", () => {
  const globals = [
    ["-n", "alpha"],
    ["--namespace=alpha"],
    ["-nalpha"],
    ["--context", "prod"],
    ["--kubeconfig", "/x"],
    ["--cache-dir", "mine"],
    ["-v", "9"],
    ["--as=alice"],
    ["--as-group", "g"],
    ["--insecure-skip-tls-verify"],
    ["--request-timeout", "1s"],
    ["-s", "https://h"],
  ];
  const locals = [["-c", "app"], ["-i"], ["-t"], ["--pod-running-timeout=1s"]];
  test("the command and its pod are found whatever the order and form", () => {
    fc.assert(
      fc.property(
        fc.subarray([...globals, ...locals]),
        fc.array(fc.nat(), { minLength: 16, maxLength: 16 }),
        (groups, positions) => {
          // Flag groups stay whole; local flags only after the command word, as kubectl requires.
          const units = [["exec"], ["other"]];
          groups.forEach((g, i) => {
            const min = locals.includes(g) ? units.findIndex((u) => u[0] === "exec") + 1 : 0;
            units.splice(min + ((positions[i] ?? 0) % (units.length + 1 - min)), 0, g);
          });
          const line = parseCommandLine([...units.flat(), "--", "ls", "-n", "x"]);
          expect(line.error).toBeUndefined();
          expect(line.path).toEqual(["exec"]);
          expect(line.positionals).toEqual(["other"]);
          expect(line.rest).toEqual(["ls", "-n", "x"]);
        },
      ),
      { numRuns: 500, seed: 42 },
    );
  });
});

describe("the words kubectl runs with", () => {
  const target = { kubeContext: "alpha", namespace: "alpha" };
  const run = (args: string[]) => {
    const line = readLine(args);
    return kubectlArgs(line, target, {}, line.plugin);
  };
  test("the context goes right after the command words, where no flag can take it as its value", () => {
    // --cache-dir takes `--` as its value here: appended before that `--`, svc's --context was swallowed.
    expect(run(["exec", "web-0", "--cache-dir", "--", "id"])).toEqual([
      "exec",
      "--context=alpha",
      "--namespace=alpha",
      "web-0",
      "--cache-dir",
      "--",
      "id",
    ]);
    expect(run(["-n", "x", "apply", "edit-last-applied", "cm/a"])).toEqual([
      "apply",
      "edit-last-applied",
      "--context=alpha",
      "-n",
      "x",
      "cm/a",
    ]);
  });
  test("svc's own flags are removed; the user's context and namespace win; a plugin gets them at the end", () => {
    expect(run(["--context", "prod", "exec", "--force", "p", "--", "rm", "--force"])).toEqual([
      "exec",
      "--namespace=alpha",
      "--context",
      "prod",
      "p",
      "--",
      "rm",
      "--force",
    ]);
    expect(run(["hello", "world"])).toEqual(["hello", "world", "--context=alpha", "--namespace=alpha"]);
  });
});
