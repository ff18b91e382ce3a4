# enoki — the two commands: `make demo` and `make test`.
SHELL := /bin/bash

.PHONY: test test-unit demo demo-down setup testbin crds fmt clippy bench bench-ui bench-languages heap-profile image release sdk-packages chaos fuzz soak

## test: install what is missing, build/start the local control plane, fmt, clippy, every test
test:
	hack/test.sh

## test-unit: the tests that need no control plane (the decision layer, the planner, the API
## types, the controller's unit tests and its call-sequence tier against a fake API): seconds
## once built; `make test` runs them too
test-unit:
	cargo test --locked -p reconciler-core -p reconciler-plan -p crds
	cargo test --locked -p reconciler-controller --lib

## demo: start a local control plane, install the CRDs, show how to reach it
demo:
	hack/demo.sh up

## demo-down: stop the demo control plane
demo-down:
	hack/demo.sh down

## setup: rust wasm targets and Debian packages
setup:
	hack/setup.sh

## testbin: build etcd, kube-apiserver, kube-controller-manager, kubectl (cached per machine)
testbin:
	hack/k8s-testbin.sh

## crds: regenerate crds/manifests/*.yaml from the Rust types
crds:
	cargo run -q -p crds --bin crdgen

## bench: controller benchmarks on a local control plane with a release build (not in CI);
## writes target/bench-controller.md (BENCH_ONLY=converge,steady,many,outage,shards to select;
## BENCH_SHARDS_ROUNDS rounds of the shards case, 2 by default, after a priming fleet that
## BENCH_SHARDS_PRIME=0 leaves out; BENCH_SHARDS_CONCURRENCY reconciles in flight per sharded
## replica, 4 by default: the unsharded replica's 8 in all)
bench:
	hack/bench.sh

## heap-profile: heaptrack of enoki reconciling 2,000 Compositions (HEAP_N), unsharded and with
## --shards 4 over 2 replicas, peak heap by allocating site (not in CI); writes target/heap-profile.md
heap-profile:
	hack/heap-profile.sh

## bench-ui: `enoki ui` on a 500-Composition fleet in headless Chromium: page bytes and time to
## the whole fleet on screen next to a plain list and `enoki get` (not in CI)
bench-ui:
	hack/bench-ui.sh

## bench-languages: module size, cold compile and warm synthesis of every sample language
## (release build; not in CI); writes target/bench-languages.md
bench-languages:
	hack/build-samples.sh
	cargo bench --locked -p enoki-tests --bench languages | tee target/bench-languages.md

## image: the container image without a daemon (static musl release build + crane), pushed to a
## local registry (or IMAGE_REPO), pulled back by digest and run; prints the pinned reference
image:
	hack/image.sh

## release: everything a release publishes, offline, into dist/ (not in CI): static enoki
## binaries (linux/amd64, linux/arm64), the image as an OCI layout tarball (an index of both),
## the packaged chart, the CRDs, the SDK packages, an SPDX SBOM, LICENSE, SHA256SUMS (verified)
release:
	hack/release.sh

## sdk-packages: pack every SDK as its ecosystem publishes it (target/sdk-packages)
sdk-packages:
	hack/sdk-packages.sh

## chaos: long forms of the fault tests (crash-anywhere, 1,000 objects × 20 SIGKILLs per seed;
## control-plane outages) on a local control plane (not in CI); writes target/chaos.md
chaos:
	hack/chaos.sh

## fuzz: coverage-guided fuzzing of every parser fed by users or modules (nightly + cargo-fuzz,
## installed if missing; FUZZ_SECONDS per target, default 600; not in CI); writes target/fuzz.md
fuzz:
	hack/fuzz.sh

## soak: 300 Compositions with inputs changing every 3 s for 30 minutes on a local control
## plane, release build (not in CI); writes target/soak.md
soak:
	hack/soak.sh
