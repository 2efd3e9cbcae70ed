/**
 * The path of a `--raw` value (get, delete, create, replace) as kubectl sends it and the API server reads
 * it, for svc to decide on (docs/svc-guard.md, "Raw access and the API proxy"). kubectl reads the value as
 * a URL: a `#` starts a fragment, which is not sent; the first `?` starts the query; a value that starts
 * with `//` names a host and one with a scheme (`https:`) loses its host; a control character is an
 * error. It decodes every percent escape of the path once (`%` and two hexadecimal digits, anything else
 * is an error) and sends the path re-encoded, so the API server's path is the decoded one: `%65xec` is
 * `exec` and `%2F` is a `/`. kubectl 1.33 and older send `.`, `..` and empty segments as written, 1.34 and
 * newer resolve them, and a proxy in between may too. The API server splits the path at `/` without
 * decoding it again; its subresources are case-sensitive.
 *
 * svc reads exactly that and refuses what it cannot read one way only: a fragment, anything but an
 * absolute path, bad escapes, dot and empty segments, and characters that other readers of a path treat
 * specially (`;`, `\`, a `%` left after decoding) or that no API path holds.
 */
import { SvcError } from "../errors.ts";

export interface RawPath {
  /** The path the API server sees (decoded, without the query). */
  path: string;
  /** Its segments; a trailing `/` makes none. */
  segments: string[];
}

/** What a decoded segment may hold. */
const SEGMENT = /^[A-Za-z0-9._~!$&'()*+,=:@-]+$/;

export function readRawPath(value: string): RawPath {
  const bad = (why: string) =>
    new SvcError(
      "usage",
      `--raw ${JSON.stringify(value)}: ${why}; svc passes only a path it reads exactly as the API server will: write the path plainly, as in /api/v1/namespaces/NAMESPACE/pods`,
    );
  if ([...value].some((c) => c < " " || c === "\x7f"))
    throw bad("it holds a control character, which kubectl refuses");
  if (value.includes("#")) throw bad("a # starts a fragment, which kubectl drops without sending it");
  const written = value.split("?", 1)[0] as string;
  if (!written.startsWith("/"))
    throw bad("it is not an absolute path (kubectl sends only a URL's path, to your kubeconfig's server)");
  if (written.startsWith("//")) throw bad("kubectl reads what follows a leading // as a host name");
  let path = "";
  for (let i = 0; i < written.length; i++) {
    let c = written[i] as string;
    let shown = c;
    if (c === "%") {
      shown = written.slice(i, i + 3);
      if (!/^%[0-9A-Fa-f]{2}$/.test(shown))
        throw bad(`an invalid percent escape ${JSON.stringify(shown)}: % takes two hexadecimal digits`);
      c = String.fromCharCode(Number.parseInt(shown.slice(1), 16));
      i += 2;
    }
    if (c <= " " || c > "~")
      throw bad(`${JSON.stringify(shown)} is a space or a character that is not printable ASCII`);
    path += c;
  }
  const read = path === written ? "the path" : `the path (read as ${path})`;
  const segments = path.slice(1).split("/");
  if (segments.at(-1) === "") segments.pop();
  for (const s of segments) {
    if (s === "")
      throw bad(
        `${read} has an empty segment (//), which kubectl 1.33 and older send as written and 1.34 and newer remove`,
      );
    if (s === "." || s === "..")
      throw bad(
        `${read} has a . or .. segment, which kubectl 1.33 and older send as written and 1.34 and newer resolve`,
      );
    const odd = [...s].find((c) => !SEGMENT.test(c));
    if (odd !== undefined)
      throw bad(
        `its segment ${JSON.stringify(s)} holds ${JSON.stringify(odd)}; a segment holds letters, digits and - . _ ~ ! $ & ' ( ) * + , = : @`,
      );
  }
  return { path, segments };
}

/** Subresources that reach into a pod, a service or a node. */
const INTO = ["proxy", "portforward", "exec", "attach"];

/** `COMMAND --raw VALUE` is refused when the path reaches into a pod, a service or a node. */
export function refuseRawIntoPods(command: string, value: string): void {
  const { path, segments } = readRawPath(value);
  if (!segments.some((s) => INTO.includes(s))) return;
  const read = path === value.split("?", 1)[0] ? "" : ` (read as ${path})`;
  throw new SvcError(
    "compartment",
    `${command} --raw ${JSON.stringify(value)}${read}: svc does not pass raw requests into pods, services or nodes (${INTO.join(", ")}); use svc exec, svc port-forward or svc logs, which are checked`,
  );
}
