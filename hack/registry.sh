#!/usr/bin/env bash
# registry.sh DIR [PORT] — start Debian's docker-registry on 127.0.0.1 with its storage and log
# in DIR (a free port unless PORT is given), wait until it answers, write its pid to DIR/pid
# and print its address (127.0.0.1:PORT). Used by `make demo` and `make image`; stop it with
# `kill "$(cat DIR/pid)"`. The module tests start their own (tests/tests/modules.rs).
set -euo pipefail
dir="$1"; port="${2:-}"
[ -x /usr/bin/docker-registry ] || { echo "registry: docker-registry is not installed (hack/setup.sh)" >&2; exit 1; }
[ -n "$port" ] || port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$dir"
printf 'version: 0.1\nlog: {level: warn}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: 127.0.0.1:%s}\n' \
  "$dir/data" "$port" > "$dir/config.yml"
/usr/bin/docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
echo $! > "$dir/pid"
for _ in $(seq 50); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && { echo "127.0.0.1:$port"; exit 0; }; sleep 0.2; done
echo "registry: nothing answers on 127.0.0.1:$port (log: $dir/registry.log)" >&2
exit 1
