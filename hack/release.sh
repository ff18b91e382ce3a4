#!/usr/bin/env bash
# release.sh — what `make release` does: build offline everything a release publishes, into
# dist/, and verify it. Not in CI (two release builds of wasmtime take a while).
#   dist/bin/enoki-V-linux-amd64, -linux-arm64   static musl binaries (arm64 cross-linked with
#                                                Debian's gcc-aarch64-linux-gnu, run under
#                                                qemu-aarch64-static to check it)
#   dist/bin/enoki-helm-V.wasm                   the built-in `helm` synthesizer's module
#   dist/enoki-V-image-oci.tar                   the image (an OCI layout: an index of
#                                                linux/amd64 and linux/arm64), user 65532,
#                                                the Helm module at /usr/lib/enoki/helm.wasm
#   dist/chart/enoki-V.tgz                       `helm package` of deploy/helm/enoki
#   dist/crds/enoki-crds.yaml, builtins-crds.yaml
#   dist/sdk/                                    every SDK packed (hack/sdk-packages.sh)
#   dist/enoki-V.spdx.json                       the SBOM of the binary's crates (cargo-sbom)
#   dist/LICENSE, dist/SHA256SUMS                sums of every file, checked at the end
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
log() { echo "release: $*" >&2; }
T0=$(date +%s)
VERSION="$(awk -F'"' '/^version = /{print $2; exit}' Cargo.toml)"
DIST="$ROOT/dist"
CARGO_SBOM_VERSION="${CARGO_SBOM_VERSION:-0.9.1}"
TOOLS_DIR="${ENOKI_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enoki-tools}"

hack/setup.sh
need_apt=()
command -v musl-gcc >/dev/null || need_apt+=(musl-tools)
command -v aarch64-linux-gnu-gcc >/dev/null || need_apt+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64-static >/dev/null || need_apt+=(qemu-user-static)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq; $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
  rustup target list --installed | grep -qx "$t" || rustup target add "$t"
done
TOOLS="$(TOOLS="helm crane" hack/tools.sh)"
HELM="$TOOLS/helm"; CRANE="$TOOLS/crane"
SBOM_BIN="$TOOLS_DIR/cargo-sbom-$CARGO_SBOM_VERSION/bin/cargo-sbom"
if [ ! -x "$SBOM_BIN" ]; then
  t=$(date +%s)
  cargo install --locked --quiet cargo-sbom --version "$CARGO_SBOM_VERSION" --root "$TOOLS_DIR/cargo-sbom-$CARGO_SBOM_VERSION"
  log "cargo-sbom $CARGO_SBOM_VERSION installed in $(( $(date +%s) - t ))s"
fi

rm -rf "$DIST"; mkdir -p "$DIST"/{bin,chart,crds}

# ---- static binaries ----
declare -A RUST_TARGET=([amd64]=x86_64-unknown-linux-musl [arm64]=aarch64-unknown-linux-musl)
for arch in amd64 arm64; do
  target="${RUST_TARGET[$arch]}"
  t=$(date +%s)
  CC_x86_64_unknown_linux_musl=musl-gcc \
  CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc \
    cargo build --locked --release --target "$target" -p reconciler-controller --bin enoki
  bin="$DIST/bin/enoki-$VERSION-linux-$arch"
  cp "target/$target/release/enoki" "$bin"
  if [ "$arch" = arm64 ]; then aarch64-linux-gnu-strip "$bin"; else strip "$bin"; fi
  if readelf -l "$bin" | grep -q INTERP; then log "$bin is not statically linked"; exit 1; fi
  log "linux/$arch binary built in $(( $(date +%s) - t ))s ($(du -h "$bin" | cut -f1))"
done
[[ "$("$DIST/bin/enoki-$VERSION-linux-amd64" version)" == "enoki $VERSION "* ]]
[[ "$(qemu-aarch64-static "$DIST/bin/enoki-$VERSION-linux-arm64" version)" == "enoki $VERSION "* ]]
log "both binaries print 'enoki $VERSION' (arm64 under qemu-aarch64-static)"

# ---- the image: one layer per platform, an index of both, saved as an OCI layout ----
W="$ROOT/target/release-image"; rm -rf "$W"; mkdir -p "$W"
addr="$(hack/registry.sh "$W/registry")"; REG_PID="$(cat "$W/registry/pid")"
trap 'kill "$REG_PID" 2>/dev/null || true' EXIT
REPO="$addr/enoki"
# The built-in `helm` synthesizer's module: wasm, the same for both platforms.
hack/helm-module.sh "$DIST/bin/enoki-helm-$VERSION.wasm" "$DIST/bin/enoki-$VERSION-linux-amd64"
for arch in amd64 arm64; do
  root="$W/rootfs-$arch"; mkdir -p "$root/etc/ssl/certs" "$root/var/cache/enoki" "$root/tmp" "$root/usr/lib/enoki"
  cp "$DIST/bin/enoki-$VERSION-linux-$arch" "$root/enoki"
  install -m 0644 "$DIST/bin/enoki-helm-$VERSION.wasm" "$root/usr/lib/enoki/helm.wasm"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
  chmod 0755 "$root/enoki"; chmod 1777 "$root/tmp" "$root/var/cache/enoki"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$W/layer-$arch.tar" .
  ref="$REPO:$VERSION-$arch"
  "$CRANE" append --insecure --platform "linux/$arch" -f "$W/layer-$arch.tar" -t "$ref" >/dev/null
  "$CRANE" mutate --insecure "$ref" --set-platform "linux/$arch" --entrypoint=/enoki --cmd=run --user=65532:65532 \
    --label "org.opencontainers.image.title=enoki" --label "org.opencontainers.image.version=$VERSION" \
    --label "org.opencontainers.image.source=https://github.com/enoki-dev/enoki" \
    --label "org.opencontainers.image.licenses=Apache-2.0" -t "$ref" >/dev/null
done
# Both images in one OCI layout, then an image index over them with each one's platform (from
# its config) as the layout's entry, tagged with the version.
"$CRANE" pull --insecure --format=oci "$REPO:$VERSION-amd64" "$REPO:$VERSION-arm64" "$W/oci"
python3 - "$W/oci" "$VERSION" <<'PY'
import hashlib, json, os, sys
root, version = sys.argv[1:]
blob = lambda d: os.path.join(root, "blobs", *d.split(":"))
layout = json.load(open(os.path.join(root, "index.json")))
manifests = []
for m in layout["manifests"]:
    config = json.load(open(blob(json.load(open(blob(m["digest"])))["config"]["digest"])))
    manifests.append({"mediaType": m["mediaType"], "size": m["size"], "digest": m["digest"],
                      "platform": {"os": config["os"], "architecture": config["architecture"]}})
index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                    "manifests": sorted(manifests, key=lambda m: m["platform"]["architecture"])},
                   separators=(",", ":")).encode()
digest = "sha256:" + hashlib.sha256(index).hexdigest()
open(blob(digest), "wb").write(index)
json.dump({"schemaVersion": 2, "manifests": [{
    "mediaType": "application/vnd.oci.image.index.v1+json", "size": len(index), "digest": digest,
    "annotations": {"org.opencontainers.image.ref.name": version}}]},
    open(os.path.join(root, "index.json"), "w"))
PY
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$W/oci" -cf "$DIST/enoki-$VERSION-image-oci.tar" .
# Check the tarball: an index of both platforms, each image's binary runs.
mkdir -p "$W/check"; tar -xf "$DIST/enoki-$VERSION-image-oci.tar" -C "$W/check"
python3 - "$W/check" "$VERSION" <<'PY'
import json, os, subprocess, sys, tarfile
root, version = sys.argv[1:]
blob = lambda d: os.path.join(root, "blobs", *d.split(":"))
index = json.load(open(os.path.join(root, "index.json")))
inner = json.load(open(blob(index["manifests"][0]["digest"])))
platforms = {}
for m in inner["manifests"]:
    arch = m["platform"]["architecture"]
    manifest = json.load(open(blob(m["digest"])))
    config = json.load(open(blob(manifest["config"]["digest"])))
    assert config["config"]["User"] == "65532:65532", config
    assert config["config"]["Entrypoint"] == ["/enoki"], config
    with tarfile.open(blob(manifest["layers"][0]["digest"])) as t:
        t.extract("./enoki", os.path.join(root, arch), filter="data")
    run = [] if arch == "amd64" else ["qemu-aarch64-static"]
    out = subprocess.run(run + [os.path.join(root, arch, "enoki"), "version"], capture_output=True, text=True).stdout.strip()
    assert out.startswith(f"enoki {version} "), (arch, out)
    platforms[arch] = m["digest"]
assert set(platforms) == {"amd64", "arm64"}, platforms
print("image index:", ", ".join(f"linux/{a} {d[:19]}…" for a, d in sorted(platforms.items())), file=sys.stderr)
PY
# Publishing it as a user would: the extracted layout pushed to a registry, pulled back.
"$CRANE" push --insecure "$W/check" "$REPO:published" >/dev/null 2>&1
"$CRANE" manifest --insecure "$REPO:published" | grep -q '"architecture":"arm64"' || { log "the pushed image lost its platforms"; exit 1; }
log "the OCI layout pushes to a registry as a multi-platform image (crane push DIR REF)"

# ---- chart, CRDs, SDKs, SBOM, licence ----
"$HELM" package deploy/helm/enoki -d "$DIST/chart" --version "$VERSION" --app-version "$VERSION" >/dev/null
"$HELM" lint --strict "$DIST/chart/enoki-$VERSION.tgz" >/dev/null
"$HELM" template enoki "$DIST/chart/enoki-$VERSION.tgz" -n enoki-system >/dev/null
for f in deploy/base/crds/*.yaml; do echo ---; cat "$f"; done > "$DIST/crds/enoki-crds.yaml"
for f in deploy/base/crds/builtins/*.yaml; do echo ---; cat "$f"; done > "$DIST/crds/builtins-crds.yaml"
hack/sdk-packages.sh "$DIST/sdk"
"$SBOM_BIN" sbom --cargo-package reconciler-controller --output-format spdx_json_2_3 > "$DIST/enoki-$VERSION.spdx.json"
python3 - "$DIST/enoki-$VERSION.spdx.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
names = {p["name"] for p in doc["packages"]}
assert {"wasmtime", "kube", "reconciler-controller"} <= names, sorted(names)[:20]
print(f"SBOM: {len(doc['packages'])} packages, {doc['spdxVersion']}", file=sys.stderr)
PY
cp LICENSE "$DIST/"

(cd "$DIST" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | sort | xargs sha256sum > SHA256SUMS)
(cd "$DIST" && sha256sum -c --quiet SHA256SUMS)
log "$(wc -l < "$DIST/SHA256SUMS") files in dist/, checksums verified, in $(( $(date +%s) - T0 ))s"
