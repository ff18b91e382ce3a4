#!/usr/bin/env bash
# check-plan-deps.sh — fail if a pure crate's normal dependency tree (the planner,
# reconciler-plan, and the decision layer, reconciler-core) pulls in an async runtime, an HTTP
# stack, the kube client or wasmtime.
set -euo pipefail
for crate in reconciler-plan reconciler-core; do
  tree="$(cargo tree -p "$crate" -e normal --prefix none --locked)"
  if bad="$(grep -E '^(tokio|kube-client|hyper|wasmtime)( |-)' <<<"$tree")"; then
    echo "$crate must stay pure, but its dependency tree contains:" >&2
    echo "$bad" | sort -u >&2
    exit 1
  fi
  echo "$crate: $(wc -l <<<"$tree") normal dependencies, none forbidden" >&2
done
