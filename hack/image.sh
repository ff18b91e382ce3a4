#!/usr/bin/env bash
# image.sh — what `make image` does, without a container daemon: build enoki as a static
# x86_64-unknown-linux-musl binary (release), put it with the CA bundle on an empty base as
# one layer with the built-in `helm` synthesizer's module at /usr/lib/enoki/helm.wasm
# (reproducible tar: fixed owner and mtime), set user 65532, entrypoint /enoki and
# the OCI labels with crane, push it to a registry tagged with the crate version, print its
# digest, then test it: pull it back by digest, extract the root filesystem, run
# `enoki version` from it and check the config (user, entrypoint).
#   IMAGE_REPO  where to push (default: a local Debian docker-registry started here,
#               127.0.0.1:<port>/enoki; the OCI layout is also saved in target/image/oci)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
log() { echo "image: $*" >&2; }
T0=$(date +%s)
hack/setup.sh
rustup target list --installed | grep -qx x86_64-unknown-linux-musl || rustup target add x86_64-unknown-linux-musl
command -v musl-gcc >/dev/null || { SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo; $SUDO apt-get update -qq; $SUDO apt-get install -y -qq musl-tools >/dev/null; }
CRANE="$(TOOLS=crane hack/tools.sh)/crane"
VERSION="$(awk -F'"' '/^version = /{print $2; exit}' Cargo.toml)"

t=$(date +%s)
CC_x86_64_unknown_linux_musl=musl-gcc cargo build --locked --release --target x86_64-unknown-linux-musl \
  -p reconciler-controller --bin enoki
BIN=target/x86_64-unknown-linux-musl/release/enoki
log "static binary built in $(( $(date +%s) - t ))s ($(du -h "$BIN" | cut -f1))"
# Static: no program interpreter (no dynamic loader, no libc needed in the image).
if readelf -l "$BIN" | grep -q INTERP; then log "$BIN is not statically linked"; exit 1; fi

W="$ROOT/target/image"; rm -rf "$W"; mkdir -p "$W/rootfs/etc/ssl/certs" "$W/rootfs/var/cache/enoki" "$W/rootfs/tmp"
cp "$BIN" "$W/rootfs/enoki"
mkdir -p "$W/rootfs/usr/lib/enoki"
hack/helm-module.sh "$W/rootfs/usr/lib/enoki/helm.wasm" "$BIN"
chmod 0644 "$W/rootfs/usr/lib/enoki/helm.wasm"
cp /etc/ssl/certs/ca-certificates.crt "$W/rootfs/etc/ssl/certs/"
chmod 0755 "$W/rootfs/enoki"; chmod 1777 "$W/rootfs/tmp"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$W/rootfs" -cf "$W/layer.tar" .

REG_PID=""
if [ -z "${IMAGE_REPO:-}" ]; then
  addr="$(hack/registry.sh "$W/registry")"; REG_PID="$(cat "$W/registry/pid")"
  trap '[ -n "$REG_PID" ] && kill $REG_PID 2>/dev/null || true' EXIT
  IMAGE_REPO="$addr/enoki"
fi
REF="$IMAGE_REPO:$VERSION"
INSECURE=(); [[ "$IMAGE_REPO" == 127.0.0.1:* || "$IMAGE_REPO" == localhost:* ]] && INSECURE=(--insecure)

"$CRANE" append "${INSECURE[@]}" --platform linux/amd64 -f "$W/layer.tar" -t "$REF" >/dev/null
DIGEST="$("$CRANE" mutate "${INSECURE[@]}" "$REF" --set-platform linux/amd64 --entrypoint=/enoki --cmd=run --user=65532:65532 \
  --label "org.opencontainers.image.title=enoki" --label "org.opencontainers.image.version=$VERSION" \
  -t "$REF" | sed 's/.*@//')"
log "pushed $REF@$DIGEST"
echo "$REF@$DIGEST" > "$W/reference"

# ---- test: pull back by digest, extract, run, inspect ----
mkdir -p "$W/pulled"
"$CRANE" export "${INSECURE[@]}" "$IMAGE_REPO@$DIGEST" - | tar -x -C "$W/pulled"
out="$("$W/pulled/enoki" version)"
[[ "$out" == "enoki $VERSION "* ]] || { log "enoki version from the image printed '$out'"; exit 1; }
[[ "$(head -c4 "$W/pulled/usr/lib/enoki/helm.wasm" | od -An -tx1 | tr -d ' ')" == 0061736d ]] \
  || { log "the image has no wasm module at /usr/lib/enoki/helm.wasm"; exit 1; }
config="$("$CRANE" config "${INSECURE[@]}" "$IMAGE_REPO@$DIGEST")"
python3 - "$config" "$VERSION" <<'PY'
import json, sys
c = json.loads(sys.argv[1])["config"]
assert c["User"] == "65532:65532", c
assert c["Entrypoint"] == ["/enoki"], c
assert c["Labels"]["org.opencontainers.image.version"] == sys.argv[2], c
PY
"$CRANE" pull "${INSECURE[@]}" --format=oci "$IMAGE_REPO@$DIGEST" "$W/oci"
size=$(du -sh "$W/oci" | cut -f1)
log "ok: '$out' from the pulled rootfs; user 65532, entrypoint /enoki; OCI layout in $W/oci ($size)"
log "image $REF@$DIGEST built and tested in $(( $(date +%s) - T0 ))s"
echo "$REF@$DIGEST"
