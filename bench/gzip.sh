#!/usr/bin/env bash
# Gzip JSONL benchmark: how fast pipeline-pulse counts (inspect = false) and inspects
# (inspect = true) the `.jsonl.gz` files a datatrove run writes, next to `zcat | wc -l` on the
# same files (gzip's own inflater and the newline count): the catch-up a sidecar does when it
# starts beside a run that has written gigabytes.
#
# usage: bench/gzip.sh                      # uses target/release/pipeline-pulse
#        PULSE=/path/to/pipeline-pulse bench/gzip.sh
#
# Settings (environment): PULSE, PYTHON, BENCH_DIR, BENCH_RUNS as bench/outputs.sh;
#   BENCH_JSONL_MB MiB of JSONL (before compression), over 4 files   [512]
#
# Prints markdown for BENCHMARKS.md on stdout, progress on stderr. A measurement, not a test:
# it fails only when pulse did not count every line that `zcat | wc -l` counts.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BENCH_JSONL_MB=${BENCH_JSONL_MB:-512}

jsonl=$BENCH_DIR/jsonl-$BENCH_JSONL_MB
ensure_jsonl "$jsonl" "$BENCH_JSONL_MB"
gz=$BENCH_DIR/gz-$BENCH_JSONL_MB
# datatrove's layout: output/<subset>/00000.jsonl.gz, compressed as Python's gzip module does
# (level 9, its default).
for f in "$jsonl"/*/raw_responses.jsonl; do
    part=$(basename "$(dirname "$f")")
    out=$gz/output/$part/00000.jsonl.gz
    if [[ ! -s $out ]]; then
        mkdir -p "$(dirname "$out")"
        say "compressing $f..."
        gzip -9 -c "$f" >"$out.tmp" && mv "$out.tmp" "$out"
    fi
done
files=("$gz"/output/*/00000.jsonl.gz)
gz_bytes=$(cat "${files[@]}" | wc -c)
cat "${files[@]}" >/dev/null # every tool reads from the page cache

for mode in count inspect; do
    inspect=$([[ $mode == inspect ]] && echo true || echo false)
    cat >"$BENCH_DIR/gzip-$mode.toml" <<TOML
[[outputs]]
glob = "$gz/output/*/[0-9]*.jsonl.gz"
inspect = $inspect
TOML
done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
say "timing (load average $load_before)..."
time_runs zcat-wc sh -c "zcat ${files[*]} | wc -l"
time_runs gz-count "$PULSE" run --once --config "$BENCH_DIR/gzip-count.toml"
time_runs gz-inspect "$PULSE" run --once --config "$BENCH_DIR/gzip-inspect.toml"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
read -r z_wall z_cpu z_rss < <(best zcat-wc)
read -r c_wall c_cpu c_rss < <(best gz-count)
read -r i_wall i_cpu i_rss < <(best gz-inspect)

sum() {
    awk -v m="$2" '(index($1, m "{") == 1 || $1 == m) { s += $2 } END { printf "%d\n", s }' "$BENCH_DIR/$1.out"
}
lines=$(tr -d ' ' <"$BENCH_DIR/zcat-wc.out")
c_records=$(sum gz-count pulse_output_records_total)
i_records=$(sum gz-inspect pulse_output_records_total)
[[ $c_records == "$lines" ]] || die "pulse (counting) saw $c_records records, zcat | wc -l $lines"
[[ $i_records == "$lines" ]] || die "pulse (inspecting) saw $i_records records, zcat | wc -l $lines"

row() {
    printf '| %s | %s | %s | %s | %s |\n' "$1" "$2" "$(calc '%.0f' "$lines / $2")" "$3" "$(calc '%.1f' "$4 / 1024")"
}
cat <<MD
- Files: 4 x $((BENCH_JSONL_MB / 4)) MiB of JSONL from bench/gen_jsonl.py, gzip -9: $(calc '%.0f' "$gz_bytes / 1048576") MiB compressed, $lines records.
- Machine: $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo); load average $load_before before, $load_after after.
- $($PULSE --version); $(gzip --version | head -n1). Best of $BENCH_RUNS runs by wall time; CPU = user + sys (both processes of the pipe for zcat).

| tool | wall s | records/s | CPU s | peak RSS MiB |
|---|---:|---:|---:|---:|
$(row 'zcat \| wc -l' "$z_wall" "$z_cpu" "$z_rss")
$(row 'pipeline-pulse, counting' "$c_wall" "$c_cpu" "$c_rss")
$(row 'pipeline-pulse, full inspection' "$i_wall" "$i_cpu" "$i_rss")

| figure | value |
|---|---:|
| counting wall / \`zcat \| wc -l\` wall | $(calc '%.2f' "$c_wall / $z_wall")x |
| inspection wall / \`zcat \| wc -l\` wall | $(calc '%.2f' "$i_wall / $z_wall")x |
MD
