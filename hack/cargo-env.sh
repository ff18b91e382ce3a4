# cargo-env.sh — sourced by hack/test.sh and hack/demo.sh so both build the workspace the same
# way (one set of artifacts: `make demo` after `make test` rebuilds nothing).
#
# Clippy runs inside the build: clippy-driver is the workspace's rustc wrapper and gets the
# lint flags through CLIPPY_ARGS (what `cargo clippy` itself sets), so the workspace is
# compiled once — linted and code-generated in one pass — instead of a `cargo build` followed
# by a `cargo clippy` that compiles everything again in check mode. Dependencies are built by
# plain rustc either way. `cargo test` with the same environment reuses the build.
CLIPPY_DRIVER="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)"
if [ -z "$CLIPPY_DRIVER" ]; then
  echo "cargo-env: clippy-driver not found (rustup component add clippy; hack/setup.sh does)" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$CLIPPY_DRIVER"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
