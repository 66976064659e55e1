#!/usr/bin/env bash
# Ingest benchmark: how fast pipeline-pulse reads a large run_inference log, next to mtail
# running an equivalent program (bench/mtail/run_inference.mtail) and `wc -l` for scale. mtail
# also runs a program that only counts lines (bench/mtail-floor/), to show how much of its time
# is the program and how much is mtail itself.
#
# usage: bench/ingest.sh                      # uses target/release/pipeline-pulse
#        PULSE=/path/to/pipeline-pulse bench/ingest.sh
#
# Settings (environment):
#   PULSE        pipeline-pulse binary       [target/release/pipeline-pulse]
#   MTAIL        mtail binary                [mtail]
#   PYTHON       python for the generator    [python3]
#   BENCH_DIR    work dir for the log/output [/tmp/pulse-bench]
#   BENCH_LINES  lines in the generated log  [2000000]
#   BENCH_RUNS   runs per tool               [3]
#
# Prints a markdown table for BENCHMARKS.md on stdout; progress goes to stderr. This is a
# measurement, not a test: it only fails when a tool did not read the whole log, because then
# its figures would mean nothing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MTAIL=${MTAIL:-mtail}
# Not LINES: interactive shells export that as the terminal height.
BENCH_LINES=${BENCH_LINES:-2000000}

log=$BENCH_DIR/run_inference-$BENCH_LINES.log
progs=$here/mtail
floor_progs=$here/mtail-floor

command -v "$MTAIL" >/dev/null || die "no mtail ($MTAIL); apt-get install mtail, or set MTAIL"
# mtail loads every file in --progs; anything but .mtail there would be compiled too.
for f in "$progs"/* "$floor_progs"/*; do
    [[ $f == *.mtail ]] || die "${f%/*} must hold only .mtail files, found $f"
done


# The log is kept between runs: generating it takes longer than benchmarking it.
if [[ ! -f $log ]] || [[ $(wc -l <"$log") -ne $BENCH_LINES ]]; then
    say "generating $log ($BENCH_LINES lines)..."
    "$PYTHON" "$here/gen_log.py" "$log.tmp" "$BENCH_LINES"
    mv "$log.tmp" "$log"
fi
# Every tool should read from the page cache, or the first one measured pays for the disk.
cat "$log" >/dev/null

# median NAME FIELD: the median over the runs (time_runs) of wall (1), cpu (2) or rss_kb (3).
# Each figure's median is taken on its own; with few runs on a shared machine that is steadier
# than picking one run.
median() {
    awk -v f="$2" '{ print $f }' "$BENCH_DIR/$1.times" | sort -g | awk '{ a[NR] = $1 } END {
            print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
say "timing (load average $load_before)..."
time_runs wc wc -l "$log"
time_runs pulse "$PULSE" run --once --log "$log"
# --port 0: one-shot mode still opens its HTTP listener, and a fixed port may be taken.
mtail_flags=(--one_shot --one_shot_format=prometheus --logs "$log" --logtostderr
    --address 127.0.0.1 --port 0)
time_runs mtail "$MTAIL" "${mtail_flags[@]}" --progs "$progs"
time_runs mtail-floor "$MTAIL" "${mtail_flags[@]}" --progs "$floor_progs"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# Both tools must have seen every line, and matched the same ones, for the race to be fair.
metric() {
    awk -v m="$2" '$1 == m || index($1, m "{") == 1 { print $2 + 0; exit }' "$BENCH_DIR/$1.out"
}
wc_lines=$(awk '{ print $1; exit }' "$BENCH_DIR/wc.out")
pulse_lines=$(metric pulse pulse_log_lines_total)
pulse_matched=$(metric pulse pulse_log_lines_matched_total)
mtail_lines=$(metric mtail log_lines_total)
mtail_matched=$(metric mtail log_lines_matched_total)
floor_lines=$(metric mtail-floor log_lines_total)
# A runtime error makes mtail abandon the rest of its program for that line.
mtail_errors=$(grep -c 'Runtime error' "$BENCH_DIR/mtail.err" || true)
for pair in "wc:$wc_lines" "pulse:$pulse_lines" "mtail:$mtail_lines" "mtail-floor:$floor_lines"; do
    [[ ${pair#*:} == "$BENCH_LINES" ]] ||
        die "${pair%%:*} read ${pair#*:} lines, not $BENCH_LINES; see $BENCH_DIR/${pair%%:*}.out"
done
[[ $pulse_matched == "$mtail_matched" ]] ||
    say "warning: pulse matched $pulse_matched lines, mtail $mtail_matched; the programs differ"
[[ $mtail_errors == 0 ]] || say "warning: mtail logged $mtail_errors runtime errors"

declare -A wall cpu rss
for t in wc pulse mtail mtail-floor; do
    wall[$t]=$(median $t 1)
    cpu[$t]=$(median $t 2)
    rss[$t]=$(median $t 3)
done

row() {
    printf '| %s | %s | %s | %s | %s |\n' "$1" "${wall[$2]}" \
        "$(calc '%.0f' "$BENCH_LINES / ${wall[$2]}")" "$(calc '%.2f' "${cpu[$2]}")" \
        "$(calc '%.1f' "${rss[$2]} / 1024")"
}

cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
log_mib=$(calc '%.0f' "$(stat -c %s "$log") / 1048576")
pulse_version=$("$PULSE" --version)
mtail_version=$("$MTAIL" --version 2>&1 | head -n1)
wc_version=$(wc --version | head -n1)

cat <<EOF
- Log: $BENCH_LINES lines, $log_mib MiB, from bench/gen_log.py (6 partitions, ~2% noise).
- Machine: $(nproc) CPUs, $cpu_model, Linux $(uname -r);
  load average $load_before before, $load_after after.
- Versions: $pulse_version; $mtail_version; $wc_version.
- Each figure is the median of $BENCH_RUNS runs; CPU = user + sys; RSS = peak resident set.

| tool | wall s | lines/s | CPU s | peak RSS MiB |
|---|---:|---:|---:|---:|
$(row 'wc -l' wc)
$(row pipeline-pulse pulse)
$(row 'mtail, equivalent program (bench/mtail/)' mtail)
$(row 'mtail, counting lines only (bench/mtail-floor/)' mtail-floor)

| pulse vs mtail (equivalent program) | ratio |
|---|---:|
| lines/s (higher is better for pulse) | $(calc '%.1fx' "${wall[mtail]} / ${wall[pulse]}") |
| CPU s (lower is better for pulse) | $(calc '%.3f' "${cpu[pulse]} / ${cpu[mtail]}") |
| peak RSS (lower is better for pulse) | $(calc '%.2f' "${rss[pulse]} / ${rss[mtail]}") |

- Lines read: wc $wc_lines, pulse $pulse_lines, mtail $mtail_lines, mtail floor $floor_lines.
- Lines matched: pulse $pulse_matched, mtail $mtail_matched; mtail runtime errors: $mtail_errors.
EOF
