#!/usr/bin/env bash
# Many-files benchmark (issue 38): this build and a previous one side by side, in the same
# minutes, on two run folders:
#   shards: 40 partitions x 250 shards of 10 records (10,000 files, 100,000 records, written 10
#           minutes before) and a run_inference log, under the open-file limit a systemd service
#           or a login shell gets (soft and hard 1024);
#   node:   today's 50-partition node of bench/idle.sh: 50 inspected output files of 1,000
#           records, a progress log and 8 GPUs (the fake NVML library), nobody scraping.
# For each: catch-up (start to every record counted, scraping /metrics every 50 ms), the most
# descriptors held, idle CPU after the warm-up, RSS, and the median time of 20 scrapes.
#
# usage: OLD=/path/to/previous/pipeline-pulse bench/many_files.sh
#
# Settings (environment):
#   PULSE          this build                      [target/release/pipeline-pulse]
#   OLD            the build to compare with       (required)
#   FAKE_NVML      the fake libnvidia-ml          [target/release/libfake_nvml.so, built if missing]
#   IDLE_SECONDS   seconds of idle measured        [60]
#   IDLE_WARMUP    seconds before measuring idle   [70: past the minute a written file stays open]
#   CATCH_UP_LIMIT seconds to wait for every record [120]
#
# CPU is every thread's schedstat (nanoseconds on a CPU). Prints markdown on stdout.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
FAKE_NVML=${FAKE_NVML:-$root/target/release/libfake_nvml.so}
IDLE_SECONDS=${IDLE_SECONDS:-60}
IDLE_WARMUP=${IDLE_WARMUP:-70}
CATCH_UP_LIMIT=${CATCH_UP_LIMIT:-120}
[[ -x ${OLD:-} ]] || die "set OLD to the pipeline-pulse binary to compare with"
command -v curl >/dev/null || die "curl is needed (apt-get install curl)"
command -v prlimit >/dev/null || die "prlimit is needed (apt-get install util-linux)"
if [[ ! -f $FAKE_NVML ]]; then
    say "building the fake NVML library..."
    (cd "$root" && cargo build --release --quiet -p fake-nvml)
fi

work=$BENCH_DIR/many-files
rm -rf "$work"
say "writing 10,000 shards..."
"$PYTHON" "$here/gen_shards.py" "$work/shards" 40 250 10 >/dev/null
find "$work/shards/prepared" -name '*.jsonl' -exec touch -d '10 minutes ago' {} +
"$PYTHON" "$here/gen_node.py" "$work/node"

port=19941
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d\n", s }'; }
fds() { ls /proc/"$1"/fd 2>/dev/null | wc -l; }
rss_mib() { awk '/^VmRSS/ { printf "%.1f\n", $2 / 1024 }' /proc/"$1"/status; }
records() { curl -fsS -m 10 "http://127.0.0.1:$port/metrics" 2>/dev/null |
    awk '/^pulse_output_records_total\{/ { s += $2 } END { printf "%d\n", s }'; }

# one BINARY SCENARIO WANT: starts BINARY on SCENARIO, prints
# `catch_up_s most_fds idle_cpu_percent rss_mib scrape_ms counted`.
one() {
    local bin=$1 scenario=$2 want=$3 pid start counted=0 most=0 n
    case $scenario in
    shards)
        prlimit --nofile=1024:1024 "$bin" run --listen "127.0.0.1:$port" --gpu off \
            --log "$work/shards/run.log" --outputs "$work/shards/prepared/*/shard-*.jsonl" \
            >/dev/null 2>"$BENCH_DIR/many-$scenario.err" &
        ;;
    node)
        FAKE_NVML_SCRIPT=$work/node/nvml.json "$bin" run --listen "127.0.0.1:$port" \
            --log "$work/node/run/run.log" --outputs "$work/node/run/prepared/*/raw_responses.jsonl" \
            --gpu on --nvml-library "$FAKE_NVML" >/dev/null 2>"$BENCH_DIR/many-$scenario.err" &
        ;;
    esac
    pid=$!
    pids+=("$pid")
    start=$EPOCHREALTIME
    local catch_up="none_within_${CATCH_UP_LIMIT}s"
    while (($(calc '%d' "$EPOCHREALTIME - $start") < CATCH_UP_LIMIT)); do
        n=$(fds "$pid")
        ((n > most)) && most=$n
        counted=$(records || echo 0)
        if [[ $counted == "$want" ]]; then
            catch_up=$(calc '%.2f' "$EPOCHREALTIME - $start")
            break
        fi
        sleep 0.05
    done
    # Idle: after the warm-up, nobody scraping; descriptors sampled each second.
    local deadline=$((SECONDS + IDLE_WARMUP))
    while ((SECONDS < deadline)); do
        n=$(fds "$pid")
        ((n > most)) && most=$n
        sleep 1
    done
    local a b t0
    t0=$EPOCHREALTIME
    a=$(cpu_ns "$pid")
    sleep "$IDLE_SECONDS"
    b=$(cpu_ns "$pid")
    local idle
    idle=$(calc '%.3f' "($b - $a) / 1e9 / ($EPOCHREALTIME - $t0) * 100")
    # Prometheus' default scrape timeout is 10 s: a scrape past it is no answer.
    local times=() t
    for _ in $(seq 20); do
        t=$(curl -fsS -m 10 -o /dev/null -w '%{time_total}' "http://127.0.0.1:$port/metrics" 2>/dev/null) || t=none
        times+=("$t")
    done
    local scrape
    scrape=$(printf '%s\n' "${times[@]}" | sort -g | awk '$1 == "none" { dead++; next } { a[++n] = $1 }
        END { if (dead) printf "%d of 20 unanswered in 10 s", dead; else printf "%.1f", a[int((n + 1) / 2)] * 1000 }')
    echo "$catch_up $most $idle $(rss_mib "$pid") $scrape $counted"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

echo "- Machine: $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo); $(uname -sr)."
echo "- Load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| run folder | build | catch-up, s | most descriptors | idle CPU, % of a core | RSS, MiB | scrape, ms (median of 20) | records counted |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for scenario in shards node; do
    want=$([[ $scenario == shards ]] && echo 100000 || echo 50000)
    for build in previous this; do
        bin=$([[ $build == this ]] && echo "$PULSE" || echo "$OLD")
        say "$scenario, $build build..."
        line=$(one "$bin" "$scenario" "$want")
        # The scrape column may be words ("20 of 20 unanswered in 10 s"): it is the middle.
        read -r c f i r rest <<<"$line"
        n=${rest##* }
        s=${rest% *}
        echo "| $scenario | $build | ${c//_/ } | $f | $i | $r | $s | $n of $want |"
    done
done
