#!/usr/bin/env bash
# Output-file benchmark: how fast pipeline-pulse counts (inspect = false) and inspects
# (inspect = true) 2 GB of SGLang /generate-style JSONL in 4 partition folders, next to
# `wc -l` on the same 4 files. The design goal: counting within 2x of `wc -l`.
#
# usage: bench/outputs.sh                      # uses target/release/pipeline-pulse
#        PULSE=/path/to/pipeline-pulse bench/outputs.sh
#
# Settings (environment):
#   PULSE          pipeline-pulse binary         [target/release/pipeline-pulse]
#   PYTHON         python for the generator      [python3]
#   BENCH_DIR      work dir                      [/tmp/pulse-bench]
#   BENCH_RUNS     runs per tool                 [3]
#   BENCH_JSONL_MB MiB of JSONL, over 4 files    [2048]
#
# Prints markdown for BENCHMARKS.md on stdout, progress on stderr. A measurement, not a test:
# it fails only when pulse did not count every line that `wc -l` counts.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BENCH_JSONL_MB=${BENCH_JSONL_MB:-2048}

((BENCH_JSONL_MB > 0 && BENCH_JSONL_MB % 4 == 0)) || die "BENCH_JSONL_MB must be a multiple of 4"

jsonl=$BENCH_DIR/jsonl
ensure_jsonl "$jsonl" "$BENCH_JSONL_MB"
files=("$jsonl"/*/raw_responses.jsonl)
file_bytes=$((BENCH_JSONL_MB * 1048576 / 4))
total_bytes=$((4 * file_bytes))
cat "${files[@]}" >/dev/null # every tool reads from the page cache

# One config per mode; the glob and the partition names are the same.
for mode in count inspect; do
    inspect=$([[ $mode == inspect ]] && echo true || echo false)
    cat >"$BENCH_DIR/outputs-$mode.toml" <<EOF
[[outputs]]
glob = "$jsonl/*/raw_responses.jsonl"
inspect = $inspect
EOF
done

# --- timing -------------------------------------------------------------------------------
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
say "timing (load average $load_before)..."
time_runs wc-jsonl wc -l "${files[@]}"
time_runs pulse-count "$PULSE" run --once --config "$BENCH_DIR/outputs-count.toml"
time_runs pulse-inspect "$PULSE" run --once --config "$BENCH_DIR/outputs-inspect.toml"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
read -r wc_wall wc_cpu wc_rss < <(best wc-jsonl)
read -r c_wall c_cpu c_rss < <(best pulse-count)
read -r i_wall i_cpu i_rss < <(best pulse-inspect)

# --- checks -------------------------------------------------------------------------------
# sum NAME METRIC [LABEL_FILTER]: the metric summed over its series in NAME.out.
sum() {
    awk -v m="$2" -v f="${3:-}" '(index($1, m "{") == 1 || $1 == m) && (f == "" || index($1, f)) {
        s += $2 } END { printf "%d\n", s }' "$BENCH_DIR/$1.out"
}
wc_lines=$(awk '$2 == "total" { print $1 }' "$BENCH_DIR/wc-jsonl.out")
c_records=$(sum pulse-count pulse_output_records_total)
i_records=$(sum pulse-inspect pulse_output_records_total)
[[ $c_records == "$wc_lines" ]] || die "pulse (counting) saw $c_records records, wc -l $wc_lines lines"
[[ $i_records == "$wc_lines" ]] || die "pulse (inspecting) saw $i_records records, wc -l $wc_lines lines"

# What inspection found, against what the generator wrote (a warning, not a failure: the
# timings stand either way, but a difference would be worth a look).
manifest() { awk -F'\t' -v c="$1" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { s += $col[c] } END { printf "%d\n", s }' "$jsonl/manifest.tsv"; }
facts=()
facts_ok=1
for pair in invalid:pulse_output_invalid_records_total empty:pulse_output_empty_responses_total \
    errors:pulse_output_error_records_total tokens:pulse_output_completion_tokens_total \
    stop:'pulse_output_finish_reason_total reason="stop"' \
    length:'pulse_output_finish_reason_total reason="length"'; do
    key=${pair%%:*}
    spec=${pair#*:}
    metric=${spec%% *}
    filter=$([[ $spec == *' '* ]] && echo "${spec#* }" || true)
    want=$(manifest "$key")
    got=$(sum pulse-inspect "$metric" "$filter")
    facts+=("$key $got/$want,")
    [[ $got == "$want" ]] || { facts_ok=0; say "warning: inspection found $got $key, the generator wrote $want"; }
done
facts_line=$( ((facts_ok)) && echo "all match" || echo "DIFFER")

mb=$(calc '%.0f' "$total_bytes / 1e6")
mib=$(calc '%.0f' "$total_bytes / 1048576")
row() { # LABEL WALL CPU RSS_KB
    printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$2" \
        "$(calc '%.0f' "$total_bytes / 1e6 / $2")" "$(calc '%.0f' "$wc_lines / $2")" \
        "$3" "$(calc '%.1f' "$4 / 1024")"
}
ratio=$(calc '%.2f' "$c_wall / $wc_wall")
verdict=$(awk -v r="$ratio" 'BEGIN { print (r <= 2) ? "met" : "not met" }')

cat <<EOF
- Files: 4 x $((file_bytes / 1048576)) MiB = $mib MiB ($mb MB), $wc_lines records, from bench/gen_jsonl.py
  (SGLang /generate records; ~3% finish "length", ~1% empty text, ~0.5% errors, ~0.1% not JSON).
- Machine: $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), Linux $(uname -r);
  load average $load_before before, $load_after after.
- $($PULSE --version); $(wc --version | head -n1). Best of $BENCH_RUNS runs (by wall time);
  CPU = user + sys; RSS = peak resident set. All files read from the page cache.

| tool | wall s | MB/s | records/s | CPU s | peak RSS MiB |
|---|---:|---:|---:|---:|---:|
$(row 'wc -l (the 4 files)' "$wc_wall" "$wc_cpu" "$wc_rss")
$(row 'pipeline-pulse, counting (`inspect = false`)' "$c_wall" "$c_cpu" "$c_rss")
$(row 'pipeline-pulse, full inspection (`inspect = true`)' "$i_wall" "$i_cpu" "$i_rss")

| figure | value |
|---|---:|
| counting wall / \`wc -l\` wall (goal: 2x or less) | ${ratio}x ($verdict) |
| full inspection throughput | $(calc '%.0f' "$total_bytes / 1e6 / $i_wall") MB/s ($(calc '%.1f' "$i_wall / $wc_wall")x \`wc -l\`'s wall) |

- Records: wc -l $wc_lines, pulse counting $c_records, pulse inspecting $i_records.
- Inspection against the generator's manifest (found/written): ${facts[*]} $facts_line.
EOF
