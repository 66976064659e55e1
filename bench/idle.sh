#!/usr/bin/env bash
# Idle benchmark: what a sidecar costs while the run it watches writes nothing. pulse follows
# 50 output files (inspected), one progress log and 8 GPUs (the fake NVML library, sampled
# every gpu_interval), at the default poll interval, with nobody scraping it; node_exporter,
# with its default collectors, idles beside it on the same machine for the same time. Then
# both again with a scrape every 15 s, what Prometheus would do.
#
# usage: bench/idle.sh                   # uses target/release/pipeline-pulse
#        PULSE=/path/to/pipeline-pulse bench/idle.sh
#
# Settings (environment):
#   PULSE          pipeline-pulse binary            [target/release/pipeline-pulse]
#   NODE_EXPORTER  node_exporter binary             [prometheus-node-exporter]
#   FAKE_NVML      the fake libnvidia-ml            [target/release/libfake_nvml.so, built if missing]
#   BENCH_DIR      work dir                         [/tmp/pulse-bench]
#   IDLE_SECONDS   seconds measured per row         [60]
#   IDLE_WARMUP    seconds before measuring         [40: files quiet for 30 s are looked at
#                                                    less often, and idle is the long quiet]
#
# CPU is read from /proc/PID/task/*/schedstat (nanoseconds on a CPU, every thread), not from
# the 10 ms ticks of /proc/PID/stat: 0.1 % of a core over a minute is 60 ms, six ticks.
# Prints markdown for BENCHMARKS.md on stdout, progress on stderr.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
NODE_EXPORTER=${NODE_EXPORTER:-$(command -v prometheus-node-exporter || command -v node_exporter || true)}
FAKE_NVML=${FAKE_NVML:-$root/target/release/libfake_nvml.so}
IDLE_SECONDS=${IDLE_SECONDS:-60}
IDLE_WARMUP=${IDLE_WARMUP:-40}

[[ -x $NODE_EXPORTER ]] || die "node_exporter is needed (apt-get install prometheus-node-exporter, or set NODE_EXPORTER)"
command -v curl >/dev/null || die "curl is needed (apt-get install curl)"
if [[ ! -f $FAKE_NVML ]]; then
    say "building the fake NVML library..."
    (cd "$root" && cargo build --release --quiet -p fake-nvml)
fi

work=$BENCH_DIR/idle
rm -rf "$work"
mkdir -p "$work/run/prepared"
# 50 partitions, each with 1000 records already written, and a log that stopped mid-run.
"$PYTHON" "$here/gen_node.py" "$work"

pulse_port=19931
node_port=19932
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# cpu_ns PID: nanoseconds every thread of PID has spent on a CPU (threads that ended are lost,
# which is why the sidecars are measured after their start-up threads are done).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d\n", s }'; }
rss_kib() { awk '/^VmRSS/ { print $2 }' /proc/"$1"/status; }

wait_up() {
    for _ in $(seq 100); do
        curl -fsS -o /dev/null "http://127.0.0.1:$1/metrics" 2>/dev/null && return 0
        sleep 0.1
    done
    die "nothing answers on port $1"
}

# measure NAME PID PORT SCRAPE_EVERY: prints `cpu_percent rss_mib scrapes`.
measure() {
    local name=$1 pid=$2 port=$3 every=$4 scrapes=0
    say "  $name: ${IDLE_WARMUP}s warm-up, then ${IDLE_SECONDS}s measured (scrape every ${every}s)..."
    sleep "$IDLE_WARMUP"
    local start_ns end_ns start=$EPOCHREALTIME
    start_ns=$(cpu_ns "$pid")
    local deadline=$((SECONDS + IDLE_SECONDS))
    while ((SECONDS < deadline)); do
        if ((every > 0)); then
            curl -fsS -o /dev/null "http://127.0.0.1:$port/metrics"
            scrapes=$((scrapes + 1))
            sleep "$every"
        else
            sleep 1
        fi
    done
    end_ns=$(cpu_ns "$pid")
    local wall
    wall=$(calc '%.3f' "$EPOCHREALTIME - $start")
    echo "$(calc '%.3f' "($end_ns - $start_ns) / 1e9 / $wall * 100") $(calc '%.1f' "$(rss_kib "$pid") / 1024") $scrapes"
}

start_pulse() {
    FAKE_NVML_SCRIPT=$work/nvml.json "$PULSE" run --listen "127.0.0.1:$pulse_port" \
        --log "$work/run/run.log" --outputs "$work/run/prepared/*/raw_responses.jsonl" \
        --gpu on --nvml-library "$FAKE_NVML" >/dev/null 2>"$BENCH_DIR/idle-pulse.err" &
    pids+=($!)
    wait_up "$pulse_port"
}

start_node() {
    "$NODE_EXPORTER" --web.listen-address="127.0.0.1:$node_port" >/dev/null 2>"$BENCH_DIR/idle-node.err" &
    pids+=($!)
    wait_up "$node_port"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
say "measuring (load average $load_before)..."
rows=()
for every in 0 15; do
    start_pulse
    read -r p_cpu p_rss p_n < <(measure pulse "${pids[-1]}" "$pulse_port" "$every")
    kill "${pids[-1]}"
    wait "${pids[-1]}" 2>/dev/null || true
    start_node
    read -r n_cpu n_rss n_n < <(measure node_exporter "${pids[-1]}" "$node_port" "$every")
    kill "${pids[-1]}"
    wait "${pids[-1]}" 2>/dev/null || true
    rows+=("$every $p_cpu $p_rss $p_n $n_cpu $n_rss $n_n")
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# The sidecar really was following everything (a sidecar that read nothing would idle well).
FAKE_NVML_SCRIPT=$work/nvml.json "$PULSE" run --once --log "$work/run/run.log" \
    --outputs "$work/run/prepared/*/raw_responses.jsonl" --gpu on --nvml-library "$FAKE_NVML" \
    >"$BENCH_DIR/idle-once.out" 2>/dev/null
files=$(grep -c '^pulse_output_records_total{' "$BENCH_DIR/idle-once.out" || true)
gpus=$(grep -c '^pulse_gpu_utilization_ratio{' "$BENCH_DIR/idle-once.out" || true)
[[ $files == 50 && $gpus == 8 ]] || die "pulse followed $files partitions and $gpus GPUs, not 50 and 8"

cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
echo "- Machine: $(nproc) CPUs, $cpu_model, Linux $(uname -r);"
echo "  load average $load_before before, $load_after after."
echo "- pulse: $("$PULSE" --version); 50 inspected output files, 1 log, 8 fake GPUs (sampled every 5 s), poll interval 250 ms."
echo "- node_exporter: $("$NODE_EXPORTER" --version 2>&1 | head -n1), default collectors."
echo "- ${IDLE_SECONDS} s measured per row after ${IDLE_WARMUP} s of warm-up; CPU from schedstat, RSS at the end."
echo
echo "| scrapes | pulse CPU % of a core | pulse RSS MiB | node_exporter CPU % of a core | node_exporter RSS MiB | CPU, pulse / node_exporter |"
echo "|---|---:|---:|---:|---:|---:|"
for row in "${rows[@]}"; do
    read -r every p_cpu p_rss p_n n_cpu n_rss n_n <<<"$row"
    label=$([[ $every == 0 ]] && echo "none" || echo "every ${every} s ($p_n)")
    # node_exporter does nothing at all between scrapes: no ratio to a zero.
    ratio=$(awk -v p="$p_cpu" -v n="$n_cpu" 'BEGIN { if (n > 0) printf "%.2f", p / n; else print "n/a" }')
    echo "| $label | $p_cpu | $p_rss | $n_cpu | $n_rss | $ratio |"
done
