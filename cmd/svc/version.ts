import { defineCommand } from "citty";
import { buildInfo } from "../../lib/build-info.ts";
import { action, checkOutput } from "./cli.ts";

const args = {
  output: { type: "string", alias: "o", description: "Output format: json or yaml (default: text)" },
} as const;

export default defineCommand({
  meta: { name: "version", description: "Print the svc version, commit and build date" },
  args,
  run: action(args, (a) => {
    checkOutput(a.output, ["json", "yaml"]);
    const info = buildInfo();
    const format = a.output ?? "";
    if (format === "json") process.stdout.write(`${JSON.stringify(info, null, 2)}\n`);
    else if (format === "yaml")
      process.stdout.write(
        `${Object.entries(info)
          .map(([k, v]) => `${k}: ${JSON.stringify(v)}`)
          .join("\n")}\n`,
      );
    else
      process.stdout.write(
        `svc version ${info.version} (commit ${info.commit}, built ${info.date}, ${info.runtime}, ${info.platform})\n`,
      );
  }),
});
