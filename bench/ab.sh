#!/usr/bin/env bash
# Two builds side by side: counting and inspecting the JSONL of bench/outputs.sh, and reading
# the log of bench/ingest.sh, each build and `wc -l` alternating run by run, so that a busy
# machine slows both builds alike. Prints the median and every wall time.
#
# usage: bench/ab.sh OLD_BINARY NEW_BINARY [RUNS]      # RUNS defaults to 9
#
# Run bench/outputs.sh and bench/ingest.sh once first: they generate the files in $BENCH_DIR.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OLD=${1:?usage: bench/ab.sh OLD NEW [RUNS]}
NEW=${2:?usage: bench/ab.sh OLD NEW [RUNS]}
N=${3:-9}
log=$BENCH_DIR/run_inference-${BENCH_LINES:-2000000}.log
[[ -f $BENCH_DIR/outputs-count.toml && -f $log ]] || die "run bench/outputs.sh and bench/ingest.sh first"
cd "$BENCH_DIR"
wall() {
    local s=$EPOCHREALTIME
    "$@" >/dev/null 2>&1 || die "$* failed"
    calc '%.3f' "$EPOCHREALTIME - $s"
}
declare -A runs
for ((i = 1; i <= N; i++)); do
    say "  round $i/$N"
    runs[wc_jsonl]+="$(wall wc -l jsonl/*/raw_responses.jsonl) "
    runs[old_count]+="$(wall "$OLD" run --once --config outputs-count.toml) "
    runs[new_count]+="$(wall "$NEW" run --once --config outputs-count.toml) "
    runs[old_inspect]+="$(wall "$OLD" run --once --config outputs-inspect.toml) "
    runs[new_inspect]+="$(wall "$NEW" run --once --config outputs-inspect.toml) "
    runs[wc_log]+="$(wall wc -l "$log") "
    runs[old_log]+="$(wall "$OLD" run --once --gpu off --log "$log") "
    runs[new_log]+="$(wall "$NEW" run --once --gpu off --log "$log") "
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "- Machine: $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo); $N rounds."
echo
echo "| run | median wall s | every run, s |"
echo "|---|---:|---|"
for k in wc_jsonl old_count new_count old_inspect new_inspect wc_log old_log new_log; do
    echo "| $k | $(median "${runs[$k]}") | ${runs[$k]% } |"
done
