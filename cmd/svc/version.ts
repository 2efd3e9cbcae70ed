import { defineCommand } from "citty";
import { buildInfo } from "../../lib/build-info.ts";
import { action, outputArg, printStructured } from "./cli.ts";

const args = outputArg;

export default defineCommand({
  meta: { name: "version", description: "Print the svc version, commit and build date" },
  args,
  run: action(args, async (a) => {
    const info = buildInfo();
    if (await printStructured(a.output, info)) return;
    process.stdout.write(
      `svc version ${info.version} (commit ${info.commit}, built ${info.date}, ${info.runtime}, ${info.platform})\n`,
    );
  }),
});
