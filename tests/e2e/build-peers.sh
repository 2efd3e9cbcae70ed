#!/usr/bin/env bash
# Builds the e2e test bed's peers from their Go modules into
#   ${XDG_CACHE_HOME:-~/.cache}/svc-testbed/<name>-<version>/bin
# skipping what is already built. Prints progress and the time each step took. Nothing is written into
# the repository. Usage: build-peers.sh [name...]   (names: spire spire-crds kube-apiserver etcd kwok ghostunnel
# h2spec hpack note)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/svc-testbed"
export PATH="$PATH:/usr/local/go/bin"
export GOTOOLCHAIN=auto GOFLAGS=-trimpath
# The checksum database does not answer for these here; only they are exempted.
export GONOSUMDB=k8s.io/kubernetes,github.com/landlock-lsm/go-landlock
mkdir -p "$CACHE"

started=$(date +%s)
elapsed() { echo $(($(date +%s) - $1)); }

# Reads `go build -v` package lines and shows a running count instead of hundreds of lines.
progress() {
  local n=0
  while IFS= read -r line; do
    n=$((n + 1))
    case "$line" in *": "* | "#"*) printf '\n%s\n' "$line" >&2 ;; esac
    if [ $((n % 25)) -eq 0 ]; then printf '\r      %d packages compiled' "$n" >&2; fi
  done
  [ "$n" -gt 0 ] && printf '\r      %d packages compiled\n' "$n" >&2
  return 0
}

# A built binary is executable; a fetched manifest (*.yaml) is a plain file.
present() { case "$1" in *.yaml) [ -f "$1" ] ;; *) [ -x "$1" ] ;; esac; }

# step NAME VERSION BINARY... -- command: builds into $dir/bin unless every BINARY is there already.
step() {
  local name=$1 version=$2
  shift 2
  local bins=()
  while [ "$1" != "--" ]; do bins+=("$1"); shift; done
  shift
  dir="$CACHE/$name-$version"
  local missing=0
  for b in "${bins[@]}"; do present "$dir/bin/$b" || missing=1; done
  if [ "$missing" -eq 0 ]; then
    echo "==> $name $version: cached in $dir/bin"
    return 0
  fi
  echo "==> $name $version: building (this takes minutes on a fresh machine)"
  local t0
  t0=$(date +%s)
  mkdir -p "$dir/bin"
  if ! "$@" 2> >(progress); then
    echo "==> $name $version: FAILED" >&2
    return 1
  fi
  for b in "${bins[@]}"; do
    present "$dir/bin/$b" || { echo "==> $name $version: FAILED (no $b was built)" >&2; return 1; }
  done
  echo "==> $name $version: built in $(elapsed "$t0")s"
}

# `go install pkg@version` also reads the module's version list (to report deprecation), which the module
# proxy here refuses for some modules; building inside a throwaway module needs only the one version.
# build_module MODULE@VERSION LDFLAGS PACKAGE...   ($REPLACES: space-separated old=new@version pairs)
build_module() {
  local mod=$1 ldflags=$2 src r
  shift 2
  src=$(mktemp -d)
  (cd "$src" && go mod init svc.test/build >/dev/null 2>&1 && go get "$mod" >&2 &&
    for r in ${REPLACES:-}; do go mod edit -replace "$r"; done &&
    go build -mod=mod -v -ldflags "$ldflags" -o "$dir/bin/" "$@")
  local rc=$?
  rm -rf "$src"
  return $rc
}

build_spire() {
  CGO_ENABLED=1 REPLACES="${SPIRE_REPLACES:-}" build_module "github.com/spiffe/spire@$SPIRE_VERSION" \
    "-X github.com/spiffe/spire/pkg/common/version.gittag=${SPIRE_VERSION#v}" \
    github.com/spiffe/spire/cmd/spire-server github.com/spiffe/spire/cmd/spire-agent
}

# kwok runs only with node and pod stages configured; its standard "fast" stages are copied from the module.
build_kwok() {
  build_module "sigs.k8s.io/kwok@$KWOK_VERSION" "" sigs.k8s.io/kwok/cmd/kwok || return 1
  local mod
  mod=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  mkdir -p "$dir/stages"
  cp "$mod"/kustomize/stage/node/fast/node-*.yaml "$mod"/kustomize/stage/pod/fast/pod-*.yaml "$dir/stages/"
  chmod -R u+w "$dir/stages"
}

# The SPIRE controller manager's CRDs (ClusterSPIFFEID and friends), so that the test bed's API server
# validates deploy/kubernetes/spire as a cluster running the controller manager does. Read from its Go
# module; nothing is built.
build_spire_crds() {
  local mod
  mod=$(go mod download -json "github.com/spiffe/spire-controller-manager@$SPIRE_CONTROLLER_MANAGER_VERSION" |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -n "$mod" ] || return 1
  cp "$mod"/config/crd/bases/spire.spiffe.io_*.yaml "$dir/bin/" && chmod u+w "$dir"/bin/*.yaml
}

build_ghostunnel() {
  build_module "github.com/ghostunnel/ghostunnel@$GHOSTUNNEL_VERSION" "" github.com/ghostunnel/ghostunnel
}

build_h2spec() {
  build_module "github.com/summerwind/h2spec@$H2SPEC_VERSION" "" github.com/summerwind/h2spec/cmd/h2spec
}

# A small reference peer for the HPACK differential tests (tests/integration/hpack-differential.test.ts):
# Go's golang.org/x/net/http2/hpack behind the JSON-lines protocol of tests/support/hpack-peer.py.
build_hpack() {
  local src
  src=$(mktemp -d)
  cat >"$src/main.go" <<'GO'
package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"

	"golang.org/x/net/http2/hpack"
)

type request struct {
	Op        string              `json:"op"`
	Session   int                 `json:"session"`
	TableSize uint32              `json:"tableSize"`
	Block     string              `json:"block"`
	Fields    [][]json.RawMessage `json:"fields"`
}

type session struct {
	dec *hpack.Decoder
	enc *hpack.Encoder
	buf *bytes.Buffer
}

func answer(sessions map[int]*session, r request) (map[string]any, error) {
	switch r.Op {
	case "new":
		s := &session{buf: &bytes.Buffer{}}
		s.dec = hpack.NewDecoder(r.TableSize, nil)
		s.enc = hpack.NewEncoder(s.buf)
		sessions[r.Session] = s
		return map[string]any{}, nil
	case "decode":
		b, err := hex.DecodeString(r.Block)
		if err != nil {
			return nil, err
		}
		fields, err := sessions[r.Session].dec.DecodeFull(b)
		if err != nil {
			return nil, err
		}
		list := [][]any{}
		for _, f := range fields {
			list = append(list, []any{hex.EncodeToString([]byte(f.Name)), hex.EncodeToString([]byte(f.Value)), f.Sensitive})
		}
		return map[string]any{"fields": list}, nil
	case "encode":
		s := sessions[r.Session]
		s.buf.Reset()
		for _, f := range r.Fields {
			var name, value string
			var never bool
			if err := json.Unmarshal(f[0], &name); err != nil {
				return nil, err
			}
			json.Unmarshal(f[1], &value)
			json.Unmarshal(f[2], &never)
			n, _ := hex.DecodeString(name)
			v, _ := hex.DecodeString(value)
			if err := s.enc.WriteField(hpack.HeaderField{Name: string(n), Value: string(v), Sensitive: never}); err != nil {
				return nil, err
			}
		}
		return map[string]any{"block": hex.EncodeToString(s.buf.Bytes())}, nil
	}
	return map[string]any{"error": "unknown op " + r.Op}, nil
}

func main() {
	sessions := map[int]*session{}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var r request
		res, err := map[string]any(nil), json.Unmarshal(in.Bytes(), &r)
		if err == nil {
			res, err = answer(sessions, r)
		}
		if err != nil {
			res = map[string]any{"error": err.Error()}
		}
		out.Encode(res)
	}
}
GO
  printf 'module svc.test/hpack\n\ngo 1.23\n\nrequire golang.org/x/net %s\n' "$HPACK_NET_VERSION" >"$src/go.mod"
  local rc=0
  (cd "$src" && go mod tidy >&2 && go build -v -o "$dir/bin/hpack-peer" .) || rc=$?
  rm -rf "$src"
  return $rc
}

# A reference verifier of signed-note checkpoints for tests/integration/notary-checkpoint.test.ts:
# transparency-dev's checkpoint parser and note verifiers (ECDSA as the witness and Rekor use, Ed25519),
# reading {"note", "vkey", "origin"} lines and answering {"origin", "size", "root"} or {"error"}.
build_note() {
  local src
  src=$(mktemp -d)
  cat >"$src/main.go" <<'GO'
package main

import (
	"bufio"
	"encoding/json"
	"os"

	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/formats/note"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var r struct{ Note, Vkey, Origin string }
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			out.Encode(map[string]any{"error": err.Error()})
			continue
		}
		v, err := note.NewVerifier(r.Vkey)
		if err != nil {
			out.Encode(map[string]any{"error": "vkey: " + err.Error()})
			continue
		}
		cp, _, _, err := log.ParseCheckpoint([]byte(r.Note), r.Origin, v)
		if err != nil {
			out.Encode(map[string]any{"error": err.Error()})
			continue
		}
		out.Encode(map[string]any{"origin": cp.Origin, "size": cp.Size, "root": cp.Hash})
	}
}
GO
  printf 'module svc.test/note\n\ngo 1.25\n\nrequire github.com/transparency-dev/formats %s\n' "$NOTE_FORMATS_VERSION" >"$src/go.mod"
  local rc=0
  (cd "$src" && go mod tidy >&2 && go build -v -o "$dir/bin/note-peer" .) || rc=$?
  rm -rf "$src"
  return $rc
}

# A wrapper module: etcd's server module has replace directives, which `go install pkg@version` refuses.
build_etcd() {
  local src
  src=$(mktemp -d)
  cat >"$src/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  printf 'module svc.test/etcd\n\ngo 1.23\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$src/go.mod"
  local rc=0
  (cd "$src" && go mod tidy >&2 && go build -v -o "$dir/bin/etcd" .) || rc=$?
  rm -rf "$src"
  return $rc
}

# A wrapper module for kube-apiserver, kube-controller-manager and kube-scheduler: k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with local
# paths, so each one is replaced here with its published v0.<minor>.<patch> (the list is read from that
# release's own go.mod). Version variables are set as the Kubernetes build does.
build_kube() {
  local src gomod v minor
  src=$(mktemp -d)
  gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  v=${KUBERNETES_VERSION#v1.}
  minor=${v%%.*}
  {
    printf 'module svc.test/kube\n\ngo 1.23\n\nrequire k8s.io/kubernetes %s\n\n' "$KUBERNETES_VERSION"
    sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/.*|replace \1 => \1 v0.'"$v"'|p' "$gomod"
  } >"$src/go.mod"
  mkdir -p "$src/kube-apiserver" "$src/kube-controller-manager" "$src/kube-scheduler"
  cat >"$src/kube-apiserver/main.go" <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }
GO
  cat >"$src/kube-controller-manager/main.go" <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() { os.Exit(cli.Run(app.NewControllerManagerCommand())) }
GO
  cat >"$src/kube-scheduler/main.go" <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() { os.Exit(cli.Run(app.NewSchedulerCommand())) }
GO
  local pkg=k8s.io/component-base/version rc=0
  # The checksum database answers for few of the k8s.io staging modules here, so k8s.io is exempted.
  (cd "$src" && export GONOSUMDB="$GONOSUMDB,k8s.io" && go mod tidy >&2 &&
    go build -v -o "$dir/bin/" -ldflags "-X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z" ./kube-apiserver ./kube-controller-manager ./kube-scheduler) || rc=$?
  rm -rf "$src"
  return $rc
}

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(spire spire-crds etcd kwok ghostunnel h2spec hpack note kube-apiserver)
for w in "${want[@]}"; do
  case "$w" in
    spire) step spire "$SPIRE_VERSION" spire-server spire-agent -- build_spire ;;
    kwok) step kwok "$KWOK_VERSION" kwok -- build_kwok ;;
    ghostunnel) step ghostunnel "$GHOSTUNNEL_VERSION" ghostunnel -- build_ghostunnel ;;
    h2spec) step h2spec "$H2SPEC_VERSION" h2spec -- build_h2spec ;;
    etcd) step etcd "$ETCD_VERSION" etcd -- build_etcd ;;
    hpack) step hpack-peer "$HPACK_NET_VERSION" hpack-peer -- build_hpack ;;
    note) step note-peer "$NOTE_FORMATS_VERSION" note-peer -- build_note ;;
    spire-crds) step spire-controller-manager "$SPIRE_CONTROLLER_MANAGER_VERSION" spire.spiffe.io_clusterspiffeids.yaml -- build_spire_crds ;;
    kube-apiserver | kube) step kube-apiserver "$KUBERNETES_VERSION" kube-apiserver kube-controller-manager kube-scheduler -- build_kube ;;
    *) echo "unknown peer $w (known: spire spire-crds kube-apiserver etcd kwok ghostunnel h2spec hpack note)" >&2; exit 2 ;;
  esac
done
echo "==> peers ready in $(elapsed "$started")s under $CACHE"
