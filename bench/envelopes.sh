#!/usr/bin/env bash
# Envelope benchmark: what taking the envelope off costs when pulse reads a large progress log,
# next to the same log plain and next to the tools a person would unwrap it with (`jq -r
# .message` for JSON log objects, `cut -d' ' -f4-` for a CRI container log).
#
# usage: bench/envelopes.sh                     # uses target/release/pipeline-pulse
#
# Settings (environment): PULSE, PYTHON, BENCH_DIR, BENCH_RUNS (bench/lib.sh), and
#   BENCH_LINES  lines in the generated log  [500000]
#
# Prints a markdown table for BENCHMARKS.md on stdout; progress goes to stderr. It fails when
# pulse did not read every line of a log, or read different figures through an envelope.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BENCH_LINES=${BENCH_LINES:-500000}
command -v jq >/dev/null || die "no jq; apt-get install jq"

plain=$BENCH_DIR/envelope-plain-$BENCH_LINES.log
if [[ ! -f $plain ]] || [[ $(wc -l <"$plain") -ne $BENCH_LINES ]]; then
    say "generating $plain ($BENCH_LINES lines)..."
    "$PYTHON" "$here/gen_log.py" "$plain.tmp" "$BENCH_LINES"
    mv "$plain.tmp" "$plain"
fi
# The same lines as python-json-logger writes them and as containerd writes a pod's log.
json=$BENCH_DIR/envelope-json-$BENCH_LINES.log
cri=$BENCH_DIR/envelope-cri-$BENCH_LINES.log
"$PYTHON" - "$plain" "$json" "$cri" <<'PY'
import json, sys
src, out_json, out_cri = sys.argv[1:]
with open(src, encoding="utf-8", errors="surrogateescape") as f, \
        open(out_json, "w") as j, open(out_cri, "w") as c:
    for i, line in enumerate(f):
        text = line.rstrip("\n")
        t = 1796396400 + i / 100
        stamp = f"2026-12-04 15:{int(t // 60) % 60:02d}:{t % 60:06.3f}".replace(".", ",")
        j.write(json.dumps({"asctime": stamp, "levelname": "INFO", "name": "driver",
                            "message": text}, ensure_ascii=False) + "\n")
        c.write(f"2026-12-04T15:{int(t // 60) % 60:02d}:{t % 60:012.9f}Z stdout F {text}\n")
PY
cat "$plain" "$json" "$cri" >/dev/null

median() {
    awk -v f="$2" '{ print $f }' "$BENCH_DIR/$1.times" | sort -g | awk '{ a[NR] = $1 } END {
            print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

say "timing (load average $(cut -d' ' -f1-3 /proc/loadavg))..."
time_runs pulse_plain "$PULSE" run --once --gpu off --log "$plain"
time_runs pulse_json "$PULSE" run --once --gpu off --log "$json"
time_runs pulse_cri "$PULSE" run --once --gpu off --log "$cri"
time_runs jq jq -r .message "$json"
time_runs cut cut -d' ' -f4- "$cri"

figures() { grep -E '^pulse_partition_requests_(completed|planned)' "$BENCH_DIR/$1.out"; }
for e in json cri; do
    [[ "$(figures pulse_$e)" == "$(figures pulse_plain)" ]] ||
        die "pulse read other figures through the $e envelope"
    grep -q "^pulse_log_lines_total{.*} $BENCH_LINES\$" "$BENCH_DIR/pulse_$e.out" ||
        die "pulse did not read all $BENCH_LINES lines of the $e log"
done

echo "| reading $BENCH_LINES lines | wall s | CPU s | peak RSS MiB | vs pulse, plain |"
echo "|---|---|---|---|---|"
base=$(median pulse_plain 1)
for row in "pulse_plain:pulse, plain" "pulse_json:pulse, JSON log objects" \
    "jq:jq -r .message (unwrap only)" "pulse_cri:pulse, CRI" "cut:cut -d' ' -f4- (unwrap only)"; do
    name=${row%%:*} label=${row#*:}
    wall=$(median "$name" 1) cpu=$(median "$name" 2) rss=$(median "$name" 3)
    awk -v l="$label" -v w="$wall" -v c="$cpu" -v r="$rss" -v b="$base" \
        'BEGIN { printf "| %s | %.2f | %.2f | %.0f | %.2f× |\n", l, w, c, r / 1024, w / b }'
done
