#!/usr/bin/env bash
# A real vLLM server that no test's run uses, serving on this machine while the tests run: the
# proof that no test's verdict depends on other processes on the node (docs/testing.md). A GPU
# node often has such a server (a colleague's, the next job's warming up); discovery must not
# take it as a run's (docs/configuration.md, "Which server is the run's").
#
#   scripts/bystander-vllm.sh start   # serves, then returns; prints its pid and port
#   scripts/bystander-vllm.sh stop
#
# It uses the vLLM peer (scripts/install-vllm-peer.sh) and the tests' tiny random model, made in
# its own folder outside any test's: ${PULSE_BYSTANDER_DIR:-/tmp/pulse-bystander}.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${PULSE_BYSTANDER_DIR:-/tmp/pulse-bystander}
venv=${PULSE_VLLM_VENV:-/var/cache/pipeline-pulse/vllm-venv}
pidfile="$dir/vllm.pid"

stop() {
    [ -f "$pidfile" ] || return 0
    local pid
    pid=$(cat "$pidfile")
    # Its own process group: the API server, its EngineCore and workers.
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$pidfile"
}

start() {
    if [ ! -x "$venv/bin/vllm" ]; then
        echo "no vLLM peer in $venv: run scripts/install-vllm-peer.sh as root (or set PULSE_VLLM_VENV)" >&2
        exit 1
    fi
    stop
    mkdir -p "$dir"
    [ -f "$dir/model/config.json" ] || "$venv/bin/python" tests/peers/tiny_model.py "$dir/model"
    local port
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # The settings the tests serve the tiny model with on two cores (tests/it/vllm.rs).
    (
        cd "$dir"
        VLLM_CPU_KVCACHE_SPACE=1 VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1 \
            setsid "$venv/bin/vllm" serve "$dir/model" --host 127.0.0.1 --port "$port" \
            --dtype float32 --enforce-eager --max-model-len 256 --max-num-seqs 4 \
            --num-gpu-blocks-override 5 </dev/null >"$dir/vllm.log" 2>&1 &
        echo $! >"$pidfile"
    )
    local pid
    pid=$(cat "$pidfile")
    for _ in $(seq 600); do
        if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then
            # A request served, so that its gauges and counters are not all zero.
            curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
                -d "{\"model\": \"$dir/model\", \"prompt\": \"a bystander\", \"max_tokens\": 8}" >/dev/null
            echo "bystander vLLM serving: pid $pid, port $port, log $dir/vllm.log" >&2
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "the bystander vLLM exited; its log:" >&2
            tail -n 40 "$dir/vllm.log" >&2
            exit 1
        fi
        sleep 0.5
    done
    echo "the bystander vLLM did not answer /health within 300 s; its log:" >&2
    tail -n 40 "$dir/vllm.log" >&2
    stop
    exit 1
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
