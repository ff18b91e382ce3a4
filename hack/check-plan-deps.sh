#!/usr/bin/env bash
# check-plan-deps.sh — fail if the pure planning crate's normal dependency tree pulls in an
# async runtime, an HTTP stack, the kube client or wasmtime.
set -euo pipefail
tree="$(cargo tree -p reconciler-plan -e normal --prefix none --locked)"
if bad="$(grep -E '^(tokio|kube-client|hyper|wasmtime)( |-)' <<<"$tree")"; then
  echo "reconciler-plan must stay pure, but its dependency tree contains:" >&2
  echo "$bad" | sort -u >&2
  exit 1
fi
echo "reconciler-plan: $(wc -l <<<"$tree") normal dependencies, none forbidden" >&2
