#!/usr/bin/env bash
# History memory: the sidecar's resident memory with a full history (48 h at 30 s for 8 GPUs,
# 50 partitions, the run and the server: 121 series of 5761 points), next to the same sidecar
# with none, and what the status page's load of it (`/api/history?points=960`) costs.
#
# usage: bench/history.sh        # uses target/release/pipeline-pulse
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
command -v curl >/dev/null || die "no curl; apt-get install curl"

dir=$BENCH_DIR/history
rm -rf "$dir" && mkdir -p "$dir/full" "$dir/empty"
printf 'Processing: A\nA: 1000 prompts\n  10/1000 (0 err) 1.0 req/s\n' >"$dir/run.log"
# A saved history.json, every series full, ending now (what 48 h of a busy node leaves).
"$PYTHON" - "$dir/full/history.json" <<'PY'
import json, sys, time
now = int(time.time()) // 30 * 30
n = 5761
start = now - (n - 1) * 30
s = lambda v: [[start + i * 30, v] for i in range(n)]
json.dump({"resolution": 30.0, "span": 172800.0,
    "run": {"completed": s(1234.0), "tokens_per_second": s(2345.0)},
    "partitions": {f"P{i:02d}": {"completed": s(float(i)), "tokens_per_second": s(100.0 + i)} for i in range(50)},
    "gpus": {str(g): {"utilization": s(0.9), "memory_used_bytes": s(1.3e11)} for g in range(8)},
    "server": {"running": s(48.0), "queued": s(1.0), "generation_tokens_per_second": s(2500.0)},
    "marks": []}, open(sys.argv[1], "w"))
PY
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rss() { awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
row() { # LABEL STATE_DIR
    "$PULSE" run --listen "127.0.0.1:$port" --log "$dir/run.log" --gpu simulated --gpu-processes \
        --state-dir "$2" 2>"$dir/pulse.err" &
    local pid=$!
    for _ in $(seq 500); do curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null && break; sleep 0.01; done
    sleep 1
    local loaded page gz
    loaded=$(rss $pid)
    for _ in 1 2 3; do
        page=$(curl -s -o /dev/null -w '%{size_download}' "http://127.0.0.1:$port/api/history?points=960")
        gz=$(curl -s -H 'Accept-Encoding: gzip' -o /dev/null -w '%{size_download}' "http://127.0.0.1:$port/api/history?points=960")
        curl -s -o /dev/null "http://127.0.0.1:$port/status"
    done
    printf '| %s | %s | %s | %s | %s |\n' "$1" "$loaded" "$(rss $pid)" \
        "$(calc '%.0f' "$page / 1024")" "$(calc '%.0f' "$gz / 1024")"
    kill $pid
    wait $pid 2>/dev/null || true
}
cat <<MD
- Machine: $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo); $($PULSE --version).

| history | RSS MiB, loaded | RSS MiB, after 3 page loads | page load KiB | gzipped KiB |
|---|---:|---:|---:|---:|
$(row 'none' "$dir/empty")
$(row 'full: 121 series × 5761 points' "$dir/full")
MD
