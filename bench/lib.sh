# Shared by the bench/*.sh scripts (sourced, not run): settings, messages, and timing a
# command the same way everywhere.

here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
root=$(dirname "$here")
PULSE=${PULSE:-$root/target/release/pipeline-pulse}
PYTHON=${PYTHON:-python3}
BENCH_DIR=${BENCH_DIR:-/tmp/pulse-bench}
BENCH_RUNS=${BENCH_RUNS:-3}
# GNU time, not the shell keyword: we need peak RSS, and -o keeps it off the tool's stderr.
TIME=/usr/bin/time

say() { printf '%s\n' "$*" >&2; }
die() { say "$(basename "${BASH_SOURCE[-1]}"): $*"; exit 1; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }

[[ -x $PULSE ]] || die "no pipeline-pulse binary at $PULSE (cargo build --release, or set PULSE)"
[[ -x $TIME ]] || die "GNU time is needed at $TIME (apt-get install time)"
mkdir -p "$BENCH_DIR"

# time_runs NAME CMD...: runs CMD BENCH_RUNS times, stdout to $BENCH_DIR/NAME.out, stderr to
# NAME.err, and one `wall cpu maxrss_kb` line per run to NAME.times. Wall comes from the
# shell's microsecond clock: GNU time's %e has 10 ms steps, coarse next to a 0.2 s run.
time_runs() {
    local name=$1
    shift
    : >"$BENCH_DIR/$name.times"
    for ((i = 1; i <= BENCH_RUNS; i++)); do
        say "  $name, run $i/$BENCH_RUNS"
        local start=$EPOCHREALTIME
        "$TIME" -f '%U %S %M' -o "$BENCH_DIR/$name.time1" "$@" \
            >"$BENCH_DIR/$name.out" 2>"$BENCH_DIR/$name.err" ||
            die "$name failed; see $BENCH_DIR/$name.err"
        local end=$EPOCHREALTIME
        awk -v s="$start" -v e="$end" '{ printf "%.3f %.2f %d\n", e - s, $1 + $2, $3 }' \
            "$BENCH_DIR/$name.time1" >>"$BENCH_DIR/$name.times"
    done
}

# best NAME: the `wall cpu rss` line of the fastest run.
best() { sort -g "$BENCH_DIR/$1.times" | head -n1; }
