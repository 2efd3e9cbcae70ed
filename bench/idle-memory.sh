#!/usr/bin/env bash
# Idle anonymous memory (RssAnon) of one client-mode svc-proxy: starts `svc dev workload-api` and the
# proxy (the given binary, default dist/svc-proxy), waits until it listens and a moment more, and prints
# its RssAnon from /proc. Needs `make build`.
#   bench/idle-memory.sh [path/to/svc-proxy] [metrics-address, default "0": off]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-dist/svc-proxy}
metrics=${2:-0}
dir=$(mktemp -d)
trap 'kill $proxy $api 2>/dev/null; rm -rf "$dir"' EXIT
dist/svc dev workload-api --socket "$dir/s.sock" --spiffe-id spiffe://bench.svc/ns/bench/sa/client \
  --ca-dir "$dir/ca" >/dev/null 2>&1 &
api=$!
for _ in $(seq 100); do [ -S "$dir/s.sock" ] && break; sleep 0.1; done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
SVC_PROXY_CONFIG='{"spiffe":{"workload_socket_path":"unix://'"$dir"'/s.sock"},"metricsAddr":"'"$metrics"'","listeners":[{"name":"out","address":"127.0.0.1:'"$port"'","mode":"client","target":{"url":"https://127.0.0.1:9","spiffe_ids":["^spiffe://bench\\.svc/ns/bench/sa/server$"]}}]}' \
  "$bin" -zap-log-level=warn &
proxy=$!
for _ in $(seq 100); do ss -ltn | grep -q ":$port " && break; sleep 0.1; done
# Idle: what start-up left behind, after the last of its timers.
sleep 1.5
grep RssAnon "/proc/$proxy/status"
