#!/usr/bin/env bash
# fuzz.sh — what `make fuzz` does (not part of `make test`): install a nightly toolchain and
# cargo-fuzz if missing, then fuzz every target of tests/fuzz-targets for FUZZ_SECONDS
# (default 600) each, FUZZ_JOBS (default 2) targets at a time, coverage-guided (libFuzzer).
# The generated corpus lives in fuzz/corpus/<target>/ (ignored by git; started from the
# committed seeds in fuzz/seeds/<target>/ and minimized with cargo fuzz cmin at the end;
# make test replays it when present). Panics land in fuzz/artifacts/<target>/: fix, then keep
# the input in fuzz/regressions/<target>/ (committed, replayed by make test).
# Figures go to target/fuzz.md. FUZZ_TARGETS="cel overrides" selects targets.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
SECONDS_EACH="${FUZZ_SECONDS:-600}"
JOBS="${FUZZ_JOBS:-2}"
CARGO_FUZZ_VERSION=0.13.2
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  cargo +stable install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi
TARGETS="${FUZZ_TARGETS:-$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^enoki-fuzz$')}"
mkdir -p target
T0=$(date +%s)
# --sanitizer none: Rust code is memory-safe; what is sought is panics, hangs and blow-ups.
(cd fuzz && cargo +nightly fuzz build --sanitizer none -O)
run_one() {
  local t="$1" log="target/fuzz-$1.log"
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  cp -n "fuzz/seeds/$t"/* "fuzz/corpus/$t/" 2>/dev/null || true
  if (cd fuzz && cargo +nightly fuzz run "$t" --sanitizer none -O -- \
      -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1) >"$log" 2>&1; then
    echo "| $t | ${SECONDS_EACH} s | $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1) runs | $(ls "fuzz/corpus/$t" | wc -l) inputs | no panic |"
  else
    echo "| $t | — | — | $(ls "fuzz/corpus/$t" | wc -l) inputs | **failed**: see $log and fuzz/artifacts/$t |"
  fi
}
export -f run_one
export SECONDS_EACH
{
  echo "| target | time | executions | corpus | result |"
  echo "| --- | --- | --- | --- | --- |"
  printf '%s\n' $TARGETS | xargs -P "$JOBS" -I{} bash -c 'run_one {}'
} | tee target/fuzz.md
# Keep the corpus small: only inputs that add coverage.
for t in $TARGETS; do
  (cd fuzz && cargo +nightly fuzz cmin "$t" --sanitizer none -O >/dev/null 2>&1) || echo "cmin $t failed" >&2
done
echo "fuzz: done in $(( $(date +%s) - T0 ))s; corpus after minimizing: $(find fuzz/corpus -type f | wc -l) inputs" | tee -a target/fuzz.md
