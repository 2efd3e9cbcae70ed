import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./proc.ts";

/** The first ```sh block under the README heading that starts with `heading`, as a user would copy it. */
export function readmeBlock(heading: string): string {
  const text = readFileSync(join(ROOT, "README.md"), "utf8");
  const at = text.split("\n").findIndex((l) => /^#+ /.test(l) && l.replace(/^#+ /, "").startsWith(heading));
  if (at < 0) throw new Error(`README.md has no heading ${JSON.stringify(heading)}`);
  const rest = text.split("\n").slice(at + 1);
  const start = rest.indexOf("```sh");
  const end = rest.findIndex((l, i) => i > start && l === "```");
  if (start < 0 || end < 0) throw new Error(`README.md: no sh block under ${JSON.stringify(heading)}`);
  return rest.slice(start + 1, end).join("\n");
}
