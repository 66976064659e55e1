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

# ensure_jsonl DIR MIB: four partition folders of bench/gen_jsonl.py output under DIR, each file
# exactly a quarter of MIB. Kept between runs: regenerated only when a file (or the
# generator's manifest) is missing or has the wrong size.
ensure_jsonl() {
    local dir=$1 mib=$2 fresh=1 p f
    local file_bytes=$((mib * 1048576 / 4))
    [[ -f $dir/manifest.tsv ]] || fresh=0
    for p in B1_glaive B2_opencodeinstruct B3_longform B4_mathinstruct; do
        f=$dir/$p/raw_responses.jsonl
        [[ -f $f ]] && [[ $(stat -c %s "$f") -eq $file_bytes ]] || fresh=0
    done
    if ((!fresh)); then
        say "generating $mib MiB of JSONL under $dir..."
        rm -rf "$dir"
        "$PYTHON" "$here/gen_jsonl.py" "$dir" "$mib" 4
    fi
}
