#!/usr/bin/env bash
# Tail benchmark: (1) how fast pipeline-pulse follows a 1 GB log compared with `wc -l` on the
# same file, and (2) how much memory the sidecar holds while 10 logs grow by 1 GB in total.
#
# usage: bench/tail.sh                      # uses target/release/pipeline-pulse
#        PULSE=/path/to/pipeline-pulse bench/tail.sh
#
# Settings (environment):
#   PULSE      pipeline-pulse binary     [target/release/pipeline-pulse]
#   PYTHON     python for the generator  [python3]
#   BENCH_DIR  work dir                  [/tmp/pulse-bench]
#   BENCH_RUNS runs per tool (part 1)    [3]
#
# Prints markdown for BENCHMARKS.md on stdout, progress on stderr. A measurement, not a test.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# A 100 MiB-ish slice of a realistic log; ten of them make the 1 GB file and the ten appends.
base_lines=1900000
base=$BENCH_DIR/tail-base-$base_lines.log
if [[ ! -f $base ]] || [[ $(wc -l <"$base") -ne $base_lines ]]; then
    say "generating $base..."
    "$PYTHON" "$here/gen_log.py" "$base.tmp" "$base_lines"
    mv "$base.tmp" "$base"
fi
big=$BENCH_DIR/tail-1g.log
if [[ ! -f $big ]] || [[ $(stat -c %s "$big") -ne $((10 * $(stat -c %s "$base"))) ]]; then
    say "building $big from ten copies..."
    for _ in 1 2 3 4 5 6 7 8 9 10; do cat "$base"; done >"$big"
fi
total_lines=$((10 * base_lines))
cat "$big" >/dev/null # both tools read from the page cache

# --- part 1: throughput on one 1 GB file -------------------------------------------------
time_runs wc wc -l "$big"
time_runs pulse "$PULSE" run --once --log "$big"
read -r wc_wall wc_cpu wc_rss < <(best wc)
read -r p_wall p_cpu p_rss < <(best pulse)
p_lines=$(awk '$1 ~ /^pulse_log_lines_total/ { print $2; exit }' "$BENCH_DIR/pulse.out")
[[ $p_lines == "$total_lines" ]] || die "pulse read $p_lines lines, not $total_lines"
mib=$(calc '%.0f' "$(stat -c %s "$big") / 1048576")

# --- part 2: memory while 10 logs grow by 1 GB in total -----------------------------------
logs_dir=$BENCH_DIR/tail-ten
rm -rf "$logs_dir" && mkdir -p "$logs_dir"
port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
args=()
for i in $(seq 0 9); do args+=(--log "$logs_dir/run$i.log"); done
"$PULSE" run --listen "127.0.0.1:$port" "${args[@]}" 2>"$BENCH_DIR/ten.err" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
until curl -fsS "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1; do sleep 0.1; done
rss_idle=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
say "  appending 10 x $(calc '%.0f' "$(stat -c %s "$base") / 1048576") MiB while the sidecar follows..."
start=$EPOCHREALTIME
for i in $(seq 0 9); do
    # Appended in 1 MiB writes, as a busy writer would, not in one rename.
    dd if="$base" of="$logs_dir/run$i.log" bs=1M oflag=append conv=notrunc status=none
done
lines_seen() {
    curl -fsS "http://127.0.0.1:$port/metrics" |
        awk '$1 ~ /^pulse_log_lines_total/ { s += $2 } END { print s + 0 }'
}
until [[ $(lines_seen) == "$total_lines" ]]; do sleep 0.1; done
end=$EPOCHREALTIME
rss_peak=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
rss_after=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
cpu_ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
cpu_s=$(calc '%.2f' "$cpu_ticks / $(getconf CLK_TCK)")
kill "$pid"
wait "$pid" 2>/dev/null || true
trap - EXIT

cat <<EOF
- Machine: $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo).
- $($PULSE --version); $(wc --version | head -n1). Best of $BENCH_RUNS runs.

**Follower throughput**: \`run --once\` (tail + parse + model) on one $mib MiB, $total_lines-line log.

| tool | wall s | MB/s | lines/s | CPU s | peak RSS MiB |
|---|---:|---:|---:|---:|---:|
| wc -l | $wc_wall | $(calc '%.0f' "$mib * 1.048576 / $wc_wall") | $(calc '%.0f' "$total_lines / $wc_wall") | $wc_cpu | $(calc '%.1f' "$wc_rss / 1024") |
| pipeline-pulse | $p_wall | $(calc '%.0f' "$mib * 1.048576 / $p_wall") | $(calc '%.0f' "$total_lines / $p_wall") | $p_cpu | $(calc '%.1f' "$p_rss / 1024") |

pipeline-pulse takes $(calc '%.2f' "$p_wall / $wc_wall")x the wall time of \`wc -l\` (which only counts newlines).

**Memory while following 10 logs that grow by $mib MiB in total** (250 ms polling, live sidecar):

| figure | value |
|---|---:|
| resident memory before the appends | $(calc '%.1f' "$rss_idle / 1024") MiB |
| peak resident memory (VmHWM) | $(calc '%.1f' "$rss_peak / 1024") MiB |
| resident memory after | $(calc '%.1f' "$rss_after / 1024") MiB |
| time from first append to every line counted | $(calc '%.1f' "$end - $start") s |
| sidecar CPU over the whole run | $cpu_s s |
EOF
