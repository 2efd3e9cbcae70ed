import { describe, expect, test } from "bun:test";
import { readLine } from "../../cmd/svc/line.ts";
import { getArgs as getArgsOf } from "../../lib/kube/get-args.ts";

const getArgs = (args: string[], current: string) => ["get", ...getArgsOf(readLine(args), current)];

const CUR = "US-TS-ALPHA";

describe("svc get arguments", () => {
  test("tables get the COMPARTMENT column; other outputs stay kubectl's", () => {
    expect(getArgs(["get", "pods"], CUR)).toEqual(["get", "pods", "--label-columns=svc.io/compartment"]);
    expect(getArgs(["get", "pods", "-o", "wide"], CUR)).toEqual([
      "get",
      "pods",
      "-o",
      "wide",
      "--label-columns=svc.io/compartment",
    ]);
    expect(getArgs(["get", "pods", "-o", "yaml"], CUR)).toEqual(["get", "pods", "-o", "yaml"]);
    expect(getArgs(["get", "pods", "-ojson"], CUR)).toEqual(["get", "pods", "-ojson"]);
    expect(getArgs(["get", "pods", "--output=jsonpath={.items}"], CUR)).toEqual([
      "get",
      "pods",
      "--output=jsonpath={.items}",
    ]);
  });

  test("compartment filters become selectors, joined to the user's -l", () => {
    expect(getArgs(["get", "pods", "--current-compartment"], CUR)).toContain(
      "--selector=svc.io/compartment=US-TS-ALPHA",
    );
    expect(getArgs(["get", "pods", "--exclude-current-compartment", "-l", "app=web"], CUR)).toContain(
      "--selector=app=web,svc.io/compartment!=US-TS-ALPHA",
    );
    expect(getArgs(["get", "pods", "--compartment", "uk-s-bravo"], CUR)).toContain(
      "--selector=svc.io/compartment=UK-S-BRAVO",
    );
    expect(getArgs(["get", "pods", "--filter-compartment=UK-S-BRAVO", "-w"], CUR)).toEqual([
      "get",
      "pods",
      "-w",
      "--selector=svc.io/compartment=UK-S-BRAVO",
      "--label-columns=svc.io/compartment",
    ]);
  });

  test("bad filters are refused", () => {
    expect(readLine(["get", "pods", "--compartment"]).error).toBe("flag needs an argument: --compartment");
    // A value that is no compartment label would match nothing, silently: "bravo" is BRAVO's compartment
    // name, and its label is UK-S-BRAVO.
    for (const value of ["a b", "bravo", "UK-TOPSECRET-BRAVO", "UK-S-", "-S-BRAVO"])
      expect(() => getArgs(["get", "pods", "--compartment", value], CUR)).toThrow(
        `--compartment ${JSON.stringify(value)}: expected a compartment label <COUNTRY>-<SENSITIVITY>-<COMPARTMENT>, such as UK-S-BRAVO`,
      );
    expect(getArgs(["get", "pods", "--compartment", "uk-s-bravo"], CUR)).toContain(
      "--selector=svc.io/compartment=UK-S-BRAVO",
    );
    expect(() =>
      getArgs(["get", "pods", "--current-compartment", "--exclude-current-compartment"], CUR),
    ).toThrow("use one of");
  });
});
