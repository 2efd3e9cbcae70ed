#!/usr/bin/env bash
# Start-up time of `svc version` and `svc-proxy -version` for each bun build variant, against the bare
# Bun runtime (an empty compiled program) in the same run. Needs hyperfine (apt-get install hyperfine).
set -euo pipefail
cd "$(dirname "$0")/.."
BUN=node_modules/.bin/bun
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo 'export {}' >"$out/empty.ts"
$BUN build --compile "$out/empty.ts" --outfile "$out/empty" >/dev/null
declare -A variants=(
  [plain]=""
  [minify]="--minify"
  [bytecode]="--bytecode --format=esm"
  [minify-bytecode]="--minify --bytecode --format=esm"
)
cmds=("$out/empty")
for v in plain minify bytecode minify-bytecode; do
  # shellcheck disable=SC2086
  $BUN build --compile ${variants[$v]} cmd/svc.ts --outfile "$out/svc-$v" >/dev/null
  cmds+=("$out/svc-$v version")
done
$BUN build --compile --minify --bytecode --format=esm cmd/svc-proxy.ts --outfile "$out/svc-proxy" >/dev/null
cmds+=("$out/svc-proxy -version")
hyperfine -N --warmup 5 --runs "${RUNS:-40}" --export-json "$out/result.json" "${cmds[@]}" >/dev/null
node -e '
const r = require(process.argv[1]).results;
const base = r[0].median;
console.log("| command | median ms | mean ± sd ms | median vs. empty |\n|---|---:|---:|---:|");
for (const x of r) console.log(`| ${x.command.replace(process.argv[2], "")} | ${(x.median * 1e3).toFixed(1)} | ${(x.mean * 1e3).toFixed(1)} ± ${(x.stddev * 1e3).toFixed(1)} | ${(x.median / base).toFixed(2)} |`);
' "$out/result.json" "$out/"
ls -l "$out" | awk '/svc|empty/ && !/\.ts/ {printf "%-22s %6.1f MB\n", $9, $5/1e6}'
