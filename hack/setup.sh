#!/usr/bin/env bash
# setup.sh — install what enoki's build and tests need on a fresh machine, skipping what is
# already there: rustup components and wasm targets, Debian packages. Idempotent.
set -euo pipefail
log() { echo "setup: $*" >&2; }

# ---- Rust: components and wasm targets ----
command -v rustup >/dev/null || { log "rustup is required (Rust 1.95)"; exit 1; }
installed_targets="$(rustup target list --installed)"
for t in wasm32-wasip1 wasm32-wasip2; do
  grep -qx "$t" <<<"$installed_targets" || { log "adding rust target $t"; rustup target add "$t"; }
done
installed_components="$(rustup component list --installed)"
for c in rustfmt clippy; do
  grep -q "^$c" <<<"$installed_components" || { log "adding rust component $c"; rustup component add "$c"; }
done

# ---- Debian packages: "check|package" (a check is a command name or an absolute path) ----
PKGS=(
  "openssl|openssl"
  "curl|curl"
  "python3|python3"
  "node|nodejs"
  "npm|npm"
  "ip|iproute2"
  "clang|clang"
  "wasm-ld|lld"
  "/usr/lib/wasm32-wasi/libc.a|wasi-libc"
  "/usr/lib/llvm-14/lib/clang/14.0.6/lib/wasi/libclang_rt.builtins-wasm32.a|libclang-rt-14-dev-wasm32"
  "/usr/bin/docker-registry|docker-registry"
  "dot|graphviz"
  "chromium|chromium"
  "chromedriver|chromium-driver"
)
missing=()
for entry in "${PKGS[@]}"; do
  check="${entry%%|*}"; pkg="${entry##*|}"
  if [[ "$check" == /* ]]; then [ -e "$check" ] || missing+=("$pkg")
  else command -v "$check" >/dev/null || missing+=("$pkg"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
python3 -c 'import venv, ensurepip' 2>/dev/null || missing_venv=1
if [ -n "${missing_venv:-}" ]; then
  log "installing python3-venv (the Python synthesizer toolchain lives in a venv)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
fi
command -v go >/dev/null || { log "the go toolchain (>= 1.24) is required to build the control plane"; exit 1; }
log "ok"
