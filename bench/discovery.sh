#!/usr/bin/env bash
# Discovery benchmark: what `--run-dir` costs a sidecar on a busy node. A run folder with a
# driver writing its log and a fake SGLang server; the sidecar discovers them and rescans every
# discover_interval (the default, 30 s). Measured on a quiet machine and with EXTRA_PROCS more
# processes (sleepers, as a GPU node's serving stack, monitoring agents and Kubernetes leave),
# for this build and for another (OLD), side by side in the same minutes.
#
# usage: OLD=/path/to/previous/pipeline-pulse bench/discovery.sh
#
# Settings (environment):
#   PULSE          this build                        [target/release/pipeline-pulse]
#   OLD            the build to compare with         (required)
#   EXTRA_PROCS    sleeping processes added          [2000]
#   IDLE_SECONDS   seconds measured per row          [90: three rescans]
#   IDLE_WARMUP    seconds before measuring          [35: the start-up scan and the first rescan]
#
# CPU is every thread's schedstat (nanoseconds on a CPU). Prints markdown on stdout.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
EXTRA_PROCS=${EXTRA_PROCS:-2000}
IDLE_SECONDS=${IDLE_SECONDS:-90}
IDLE_WARMUP=${IDLE_WARMUP:-35}
[[ -x ${OLD:-} ]] || die "set OLD to the pipeline-pulse binary to compare with"
command -v curl >/dev/null || die "curl is needed (apt-get install curl)"

work=$BENCH_DIR/discovery
rm -rf "$work"
mkdir -p "$work/run/logs" "$work/run/prepared/P0" "$work/modules/sglang"
printf '{"text":"x"}\n%.0s' {1..100} >"$work/run/prepared/P0/raw_responses.jsonl"
: >"$work/modules/sglang/__init__.py"
cat >"$work/modules/sglang/launch_server.py" <<'EOF'
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
EOF

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

(cd "$work/run" && exec "$PYTHON" -c '
import time
with open("logs/progress.log", "a") as log:
    log.write("Model: /m\nProcessing: P0 (SHORT)\nP0: 1000 prompts\n  100/1000 (0 err) 2.0 req/s avg_comp=120tok ETA=1.0h\n")
    log.flush()
    time.sleep(100000)
') &
pids+=($!)
(cd "$work/modules" && exec "$PYTHON" -m sglang.launch_server --model-path /m --port 19951) >/dev/null 2>&1 &
pids+=($!)
sleep 1

cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d\n", s }'; }
port=19952

# measure BINARY: prints the sidecar's CPU in % of a core over IDLE_SECONDS.
measure() {
    "$1" run --listen "127.0.0.1:$port" --run-dir "$work/run" --gpu off \
        >/dev/null 2>"$BENCH_DIR/discovery-pulse.err" &
    local pid=$!
    pids+=("$pid")
    for _ in $(seq 100); do
        curl -fsS -o /dev/null "http://127.0.0.1:$port/metrics" 2>/dev/null && break
        sleep 0.1
    done
    sleep "$IDLE_WARMUP"
    local start_ns end_ns start=$EPOCHREALTIME
    start_ns=$(cpu_ns "$pid")
    sleep "$IDLE_SECONDS"
    end_ns=$(cpu_ns "$pid")
    local wall
    wall=$(calc '%.3f' "$EPOCHREALTIME - $start")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    calc '%.3f' "($end_ns - $start_ns) / 1e9 / $wall * 100"
}

sleepers() {
    for ((i = 0; i < EXTRA_PROCS; i++)); do
        sleep 100000 &
        pids+=($!)
    done
}

procs_now() { find /proc -maxdepth 1 -name '[0-9]*' | wc -l; }

say "quiet machine ($(procs_now) processes)..."
quiet_new=$(measure "$PULSE")
quiet_old=$(measure "$OLD")
sleepers
busy=$(procs_now)
say "with $EXTRA_PROCS more ($busy processes)..."
busy_new=$(measure "$PULSE")
busy_old=$(measure "$OLD")

cat <<EOF
- Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(uname -sr).
- A run folder (a log its driver holds open, one output file) and a fake SGLang server, found
  with \`--run-dir\` and rescanned every 30 s (the default); ${IDLE_SECONDS} s measured after ${IDLE_WARMUP} s.

| processes on the node | this build, CPU % of a core | previous build | this / previous |
|---|---:|---:|---:|
| $(( busy - EXTRA_PROCS )) (quiet) | $quiet_new | $quiet_old | $(calc '%.2f' "$quiet_new / $quiet_old") |
| $busy | $busy_new | $busy_old | $(calc '%.2f' "$busy_new / $busy_old") |
EOF
