# enoki's container image, for machines with a container engine (`docker build -t enoki .`).
# `make image` builds the same image without a daemon (hack/image.sh: a static musl binary
# put on an empty base with crane). Base images are named without a registry host: set
# BUILDER to your mirror of the Rust image if needed.
ARG BUILDER=rust:1.95-bookworm

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

# A static binary needs nothing else: no shell, no libc, no package manager.
FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
ENTRYPOINT ["/enoki"]
CMD ["run"]
