/**
 * Where the configuration comes from (docs/proxy-configuration.md): a nonempty `-config` path wins, and a
 * file that cannot be read is an error, never a fall-back to SVC_PROXY_CONFIG; otherwise SVC_PROXY_CONFIG
 * holds YAML or JSON text (not a file name); with neither, the proxy does not start.
 */
import { readFileSync } from "node:fs";
import { parse, YAMLParseError } from "yaml";
import { SvcError } from "../../lib/errors.ts";

const CONFIG_ENV = "SVC_PROXY_CONFIG";

export interface ConfigSource {
  text: string;
  /** For messages: the file path, or the variable's name. */
  origin: string;
}

export function configSource(
  flagPath: string | undefined,
  env: Record<string, string | undefined> = process.env,
): ConfigSource {
  if (flagPath) {
    try {
      return { text: readFileSync(flagPath, "utf8"), origin: flagPath };
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      const why =
        code === "ENOENT"
          ? "no such file"
          : code === "EACCES"
            ? "permission denied"
            : code === "EISDIR"
              ? "is a directory"
              : (e as Error).message;
      throw new SvcError(
        "usage",
        `-config ${flagPath}: cannot read the configuration file: ${why} (${CONFIG_ENV} is not used when -config is given)`,
      );
    }
  }
  const text = env[CONFIG_ENV];
  if (text) return { text, origin: CONFIG_ENV };
  throw new SvcError(
    "usage",
    `no configuration: pass -config <path> or set ${CONFIG_ENV} to YAML or JSON text (see -help)`,
  );
}

/** YAML (and so JSON) text to a document; syntax errors name the origin, line and column. */
export function parseConfigText(source: ConfigSource): unknown {
  try {
    const doc = parse(source.text);
    if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
      throw new SvcError(
        "usage",
        `${source.origin}: the configuration must be a YAML or JSON mapping with spiffe and listeners`,
      );
    }
    return doc;
  } catch (e) {
    if (e instanceof YAMLParseError) {
      const at = e.linePos?.[0] ? ` at line ${e.linePos[0].line}, column ${e.linePos[0].col}` : "";
      const message = (e.message.split("\n")[0] ?? "").replace(/ at line \d+, column \d+:?$/, "");
      throw new SvcError("usage", `${source.origin}: not valid YAML or JSON${at}: ${message}`);
    }
    throw e;
  }
}
