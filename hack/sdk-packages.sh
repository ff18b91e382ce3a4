#!/usr/bin/env bash
# sdk-packages.sh [OUT] — pack every SDK as its ecosystem publishes it, into OUT (default
# target/sdk-packages), with SHA256SUMS:
#   rust/enoki-sdk-V.crate (+ unpacked)  `cargo publish --dry-run`: packaged and built from the package
#   go/  a module proxy directory         github.com/enoki-dev/enoki/synthesizer-sdk/go@vV and its
#        Helm shim .../go/helm@vV (GOPROXY=file://OUT/go)
#   npm/enoki-sdk-V.tgz                   `npm pack` of @enoki/sdk (TypeScript/JavaScript, with the WIT world)
#   npm/enoki-sdk-assemblyscript-V.tgz    `npm pack` of enoki-sdk-assemblyscript
#   python/enoki_sdk-V-py3-none-any.whl   `pip wheel` of enoki-sdk (with the WIT world)
#   c/enoki.h                             the C SDK is one header
# `enoki new NAME --lang L --sdk-packages OUT` scaffolds a project that installs from these files.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="$(mkdir -p "${1:-target/sdk-packages}" && cd "${1:-target/sdk-packages}" && pwd)"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
SDK=synthesizer-sdk
GO_MODULE=github.com/enoki-dev/enoki/synthesizer-sdk/go
start=$(date +%s)
rm -rf "$OUT"/{rust,go,npm,python,c} "$OUT/SHA256SUMS"
mkdir -p "$OUT"/{rust,go,npm,python,c}

# Rust: the crate as crates.io would receive it, verified by building it from the package.
. hack/cargo-env.sh 2>/dev/null || true
cargo publish --dry-run --locked -p enoki-sdk --allow-dirty -q
cargo package --locked -p enoki-sdk --allow-dirty --no-verify -q
cp "target/package/enoki-sdk-$VERSION.crate" "$OUT/rust/"
tar -xzf "$OUT/rust/enoki-sdk-$VERSION.crate" -C "$OUT/rust"

# Go: a module proxy directory (list, .info, .mod, .zip) for GOPROXY=file://.
proxy="$OUT/go/$GO_MODULE/@v"
mkdir -p "$proxy"
echo "v$VERSION" > "$proxy/list"
printf '{"Version":"v%s"}\n' "$VERSION" > "$proxy/v$VERSION.info"
cp "$SDK/go/go.mod" "$proxy/v$VERSION.mod"
python3 - "$SDK/go" "$proxy/v$VERSION.zip" "$GO_MODULE@v$VERSION" <<'PY'
import os, sys, zipfile
src, out, prefix = sys.argv[1:]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for name in sorted(os.listdir(src)):
        if os.path.isfile(os.path.join(src, name)):
            z.write(os.path.join(src, name), f"{prefix}/{name}")
PY

# The Helm shim (github.com/enoki-dev/enoki/synthesizer-sdk/go/helm), a module of its own: its
# go.mod requires the SDK at this version instead of replacing it with the checkout.
proxy="$OUT/go/$GO_MODULE/helm/@v"
mkdir -p "$proxy"
echo "v$VERSION" > "$proxy/list"
printf '{"Version":"v%s"}\n' "$VERSION" > "$proxy/v$VERSION.info"
sed -e "s#^\(\s*$GO_MODULE\) v0.0.0#\1 v$VERSION#" -e '/^replace /d' "$SDK/go/helm/go.mod" > "$proxy/v$VERSION.mod"
python3 - "$SDK/go/helm" "$proxy/v$VERSION.zip" "$GO_MODULE/helm@v$VERSION" "$proxy/v$VERSION.mod" <<'PY'
import os, sys, zipfile
src, out, prefix, mod = sys.argv[1:]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for root, _, files in sorted(os.walk(src)):
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)
            z.write(mod if rel == "go.mod" else path, f"{prefix}/{rel}")
PY

# npm: @enoki/sdk (its prepack script copies in the WIT world), and the AssemblyScript SDK;
# packed from their own directories, as `npm publish` would.
(cd "$SDK/js" && npm pack --silent --pack-destination "$OUT/npm" >/dev/null)
(cd "$SDK/assemblyscript" && npm pack --silent --pack-destination "$OUT/npm" >/dev/null)

# Python: a wheel built from its own directory (enoki_sdk/wit links the WIT world in).
python3 -m pip wheel -q --disable-pip-version-check --no-deps -w "$OUT/python" "$SDK/python" >/dev/null
rm -rf "$SDK/python/build" "$SDK/python"/*.egg-info

cp "$SDK/c/enoki.h" "$SDK/c/README.md" "$SDK/c/LICENSE" "$OUT/c/"

(cd "$OUT" && find rust/*.crate go npm python c -type f | sort | xargs sha256sum > SHA256SUMS)
(cd "$OUT" && sha256sum -c --quiet SHA256SUMS)
echo "sdk-packages: $(wc -l < "$OUT/SHA256SUMS") files in $OUT ($(( $(date +%s) - start )) s)" >&2
