#!/usr/bin/env bash
# Wall time svc adds to kubectl on the test bed (make testbed-up; make build; hyperfine on PATH):
#   svc get pods            vs  kubectl get pods -L svc.io/compartment (the same request and output)
#   svc identity            vs  kubectl auth whoami (the cluster call it makes)
#   svc version             vs  kubectl version --client
# Prints hyperfine's table and the ratios.   RUNS=30 bench/svc-kubectl.sh [out.md]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-30}
[ -f .testbed/state.json ] || { echo "run make testbed-up first" >&2; exit 1; }
[ -x dist/svc ] || { echo "run make build first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SVC_CONFIG=$work/config.yaml KUBECONFIG=$PWD/.testbed/kubeconfig
dist/svc context create us-ts-alpha --country=US --sensitivity=TS --compartment=ALPHA \
  --kube-context=testbed-alice --namespace=alpha >/dev/null
dist/svc context use us-ts-alpha >/dev/null
k="kubectl --context=testbed-alice --namespace=alpha"
hyperfine -N --warmup 5 --runs "$RUNS" --export-markdown "$work/t.md" --export-json "$work/t.json" \
  "$k get pods -L svc.io/compartment" "dist/svc get pods" \
  "$k auth whoami" "dist/svc identity" \
  "kubectl version --client" "dist/svc version" >/dev/null
python3 - "$work/t.json" "${1:-}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
med = {x["command"]: x["median"] * 1000 for x in r}
pairs = [("svc get pods", [c for c in med if c.endswith("get pods -L svc.io/compartment")][0], "dist/svc get pods"),
         ("svc identity", [c for c in med if c.endswith("auth whoami")][0], "dist/svc identity"),
         ("svc version", "kubectl version --client", "dist/svc version")]
lines = ["| command | kubectl median ms | svc median ms | svc / kubectl |", "|---|---:|---:|---:|"]
for name, k, s in pairs:
    lines.append(f"| {name} | {med[k]:.1f} | {med[s]:.1f} | {med[s]/med[k]:.2f} |")
out = "\n".join(lines) + "\n"
print(out)
if sys.argv[2]:
    open(sys.argv[2], "w").write("# svc against kubectl (bench/svc-kubectl.sh)\n\n" + out)
PY
