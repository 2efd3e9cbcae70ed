# svc and svc-proxy. `make build` compiles both executables; `make test` is what CI runs.
SHELL := /bin/bash
BUN := node_modules/.bin/bun
TSC := node_modules/.bin/tsc
BIOME := node_modules/.bin/biome
# Integration tests start real processes and TLS servers: a generous per-test bound, never a timing assertion.
BUN_TEST := $(BUN) test --timeout 60000

VERSION ?= $(shell node -p 'require("./package.json").version')
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
TARGET  ?=
# Chosen by measurement (docs/build.md): bytecode + minify starts fastest.
BUILD_FLAGS := --compile --minify --bytecode --format=esm --splitting \
	--define 'SVC_VERSION="$(VERSION)"' --define 'SVC_COMMIT="$(COMMIT)"' --define 'SVC_DATE="$(DATE)"' \
	$(if $(TARGET),--target=$(TARGET))

SOURCES := $(shell find cmd lib proxy -name '*.ts' 2>/dev/null)

.PHONY: FORCE demo all build deps system-deps test-peers typecheck lint fmt test test-unit test-integration clean peers testbed-up testbed-down e2e soak extras image image-test release-snapshot

all: build

# JavaScript dependencies, installed when package-lock.json is newer than the last install.
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

deps: node_modules/.installed

# System packages the tests use. Installs them as root (Debian), otherwise names them.
# umoci, skopeo and bubblewrap read and run the image (make image-test); man-db renders the manual pages;
# postgresql is the notary's shared store in the tests (started on loopback per test file); python3-hpack is a
# reference HPACK for the differential tests.
SYSTEM_PACKAGES := openssl mosquitto mosquitto-clients curl bash-completion umoci skopeo bubblewrap man-db postgresql python3-hpack
system-deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing system packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "missing system packages:$$missing (install them with apt-get install$$missing)"; exit 1; fi; \
	fi

# Rewritten only when version or commit change, so binaries never carry a stale commit.
dist/.buildinfo: FORCE
	@mkdir -p dist; echo "$(VERSION) $(COMMIT) $(TARGET)" | cmp -s - $@ || echo "$(VERSION) $(COMMIT) $(TARGET)" > $@
FORCE:

dist/svc: node_modules/.installed $(SOURCES) package.json Makefile dist/.buildinfo
	$(BUN) build $(BUILD_FLAGS) cmd/svc.ts --outfile dist/svc

dist/svc-proxy: node_modules/.installed $(SOURCES) package.json Makefile dist/.buildinfo
	$(BUN) build $(BUILD_FLAGS) cmd/svc-proxy.ts --outfile dist/svc-proxy

build: dist/svc dist/svc-proxy

# The SPIFFE Workload API messages: lib/spiffe/gen/ (checked in) generated from
# proto/spiffe/workload/workload.proto by buf and the protoc-gen-es of node_modules (proto/buf.gen.yaml).
.PHONY: proto
proto: node_modules/.installed
	node_modules/.bin/buf generate --template proto/buf.gen.yaml

typecheck: deps
	$(TSC) -p .

lint: deps
	$(BIOME) check .

fmt: deps
	$(BIOME) check --write .

test-unit: deps
	$(BUN_TEST) tests/unit

test-integration: deps system-deps test-peers
	$(BUN_TEST) tests/integration

test: deps system-deps typecheck lint test-peers
	$(BUN_TEST) tests/unit tests/integration

# Two small Go reference peers for the tests: HPACK (the differential tests) and transparency-dev's checkpoint
# verifier (seconds; cached outside the clone, as the peers are).
test-peers:
	@tests/e2e/build-peers.sh hpack note >/dev/null

# Identity faults under load through a proxy pair: ten SVID rotations, a 40 s Workload API outage (about a
# minute in all; CI runs it).
soak: deps system-deps
	$(BUN) test --timeout 300000 tests/soak

# Two workloads through a client→server proxy pair, one allowed and one refused (deploy/demo/run.ts).
demo: build
	@$(BUN) deploy/demo/run.ts

# The e2e test bed: peers built from their Go modules into ~/.cache/svc-testbed (tests/e2e/versions.env),
# started on loopback under .testbed/ (docs/testbed.md).
peers:
	tests/e2e/build-peers.sh

testbed-up: deps system-deps peers
	@$(BUN) tests/e2e/testbed/cli.ts up

testbed-down: deps
	@$(BUN) tests/e2e/testbed/cli.ts down

# Runs against the running test bed if there is one; otherwise starts one, and stops it afterwards
# (keeping .testbed/logs when a test failed).
e2e: deps system-deps peers build
	@started=0; if ! $(BUN) tests/e2e/testbed/cli.ts status >/dev/null 2>&1; then \
	  $(BUN) tests/e2e/testbed/cli.ts up >/dev/null || exit 1; started=1; fi; \
	status=0; KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false $(BUN) test --timeout 300000 tests/e2e || status=$$?; \
	if [ $$started = 1 ]; then \
	  if [ $$status = 0 ]; then $(BUN) tests/e2e/testbed/cli.ts down; \
	  else $(BUN) tests/e2e/testbed/cli.ts down --keep-logs; echo "e2e failed: test bed logs kept in .testbed/logs"; fi; \
	fi; exit $$status

# Shell completions and manual pages, as the release archives carry them (dist/extras).
extras: deps
	$(BUN) release/extras.ts --out dist/extras --version $(VERSION)

# The svc-proxy image without a container engine: an OCI layout in dist/image from dist/svc-proxy and
# Debian's packages (docs/image.md). image-test unpacks it and runs svc-proxy and a proxy pair inside it.
image: build
	$(BUN) release/image.ts --binary dist/svc-proxy --out dist/image --tag $(VERSION)

image-test: image system-deps
	$(BUN_TEST) tests/image

# GoReleaser's dry run (every archive, SBOM, checksum and the cask; no image build, nothing published),
# then checks of what it wrote. GORELEASER names the binary (.ci/run installs the pinned one).
GORELEASER ?= goreleaser
release-snapshot: deps system-deps
	$(GORELEASER) release --snapshot --clean --skip=docker
	$(BUN_TEST) tests/release

clean:
	rm -rf dist
