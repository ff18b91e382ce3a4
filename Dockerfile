# enoki's container image, for machines with a container engine (`docker build -t enoki .`).
# `make image` builds the same image without a daemon (hack/image.sh: a static musl binary
# put on an empty base with crane). Base images are named without a registry host: set
# BUILDER to your mirror of the Rust image if needed.
ARG BUILDER=rust:1.95-bookworm
ARG GO_BUILDER=golang:1.26-bookworm

# The built-in `helm` synthesizer's module (Helm's engine, GOOS=wasip1, a WASI reactor, built
# without the Kubernetes API types by synthesizer-sdk/go/helm/cmd/lean), at
# the default path of `enoki run --helm-module`, pre-initialized by the enoki built below.
FROM ${GO_BUILDER} AS helm
WORKDIR /src
COPY synthesizer-sdk/go synthesizer-sdk/go
RUN cd synthesizer-sdk/go/helm && go run ./cmd/lean ../../../target/helm-lean \
 && GOOS=wasip1 GOARCH=wasm GOFLAGS=-buildvcs=false go build -modfile=../../../target/helm-lean/go.mod \
    -trimpath -buildmode=c-shared -ldflags="-s -w" -o /helm.reactor.wasm ./cmd/helm-chart

FROM ${BUILDER} AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools ca-certificates \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --locked --release --target x86_64-unknown-linux-musl -p reconciler-controller --bin enoki \
 && mkdir -p /rootfs/etc/ssl/certs /rootfs/var/cache/enoki /rootfs/tmp \
 && cp target/x86_64-unknown-linux-musl/release/enoki /rootfs/enoki \
 && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
 && chown 65532:65532 /rootfs/var/cache/enoki && chmod 1777 /rootfs/tmp
COPY --from=helm /helm.reactor.wasm /helm.reactor.wasm
RUN mkdir -p /rootfs/usr/lib/enoki && /rootfs/enoki module preinit /helm.reactor.wasm -o /rootfs/usr/lib/enoki/helm.wasm

# A static binary needs nothing else: no shell, no libc, no package manager.
FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
ENTRYPOINT ["/enoki"]
CMD ["run"]
