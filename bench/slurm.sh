#!/usr/bin/env bash
# What one sidecar costs a SLURM controller whose queue is busy (docs/slurm.md#what-it-costs):
# a one-node cluster (tests/slurm/cluster.sh) holding QUEUE held jobs, a batch job running a
# driver, and a sidecar beside it with the defaults, watched by `sdiag` for MINUTES. Each build
# given is measured in turn on the same cluster and queue; `sdiag -r` before each sidecar starts,
# so its first ask is counted.
#
# usage: bench/slurm.sh BINARY...            # e.g. an older build, then target/debug/pipeline-pulse
#
# Settings (environment):
#   QUEUE      held jobs in the queue            [10000]
#   MINUTES    minutes measured per build        [10]
#
# Needs root, SLURM and munge (scripts/install-test-peers.sh). Prints markdown on stdout:
# per build, each RPC type's count and total controller time (sdiag's microseconds), and what
# the sidecar's /status said of the controller at the end.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
QUEUE=${QUEUE:-10000}
MINUTES=${MINUTES:-10}
BENCH_DIR=${BENCH_DIR:-/tmp/pulse-bench}
say() { printf '%s\n' "$*" >&2; }
die() { say "bench/slurm.sh: $*"; exit 1; }
[[ $# -ge 1 ]] || die "usage: bench/slurm.sh BINARY..."
for b in "$@"; do [[ -x $b ]] || die "no binary at $b"; done
command -v curl >/dev/null || die "curl is needed (apt-get install curl)"

work=$BENCH_DIR/slurm
rm -rf "$work"
mkdir -p "$work/jobs"
bash "$root/tests/slurm/cluster.sh" start "$work/cluster" >/dev/null
export SLURM_CONF=$work/cluster/slurm.conf
trap 'bash "$root/tests/slurm/cluster.sh" stop "$work/cluster"' EXIT
cd "$work/jobs"

say "submitting $QUEUE held jobs..."
start=$EPOCHREALTIME
seq "$QUEUE" | xargs -P 4 -I{} sbatch --hold -o /dev/null --wrap 'sleep 1000' >/dev/null
say "  $(awk "BEGIN { printf \"%.0f\", $EPOCHREALTIME - $start }") s"
say "the whole queue as squeue --json prints it: $(squeue --json | wc -c) bytes"

echo "| build | RPC | count | controller time (ms) |"
echo "|---|---|---|---|"
n=0
for bin in "$@"; do
    n=$((n + 1))
    log=$work/run-$n.log
    job=$(sbatch --parsable -t $((MINUTES + 5)) -o /dev/null \
        --wrap "exec python3 $root/tests/peers/slow_driver.py $log 100000 2")
    until [[ $(scontrol --local -o show job "$job" | grep -o 'JobState=[A-Z]*') == JobState=RUNNING ]]; do
        sleep 0.5
    done
    sdiag -r >/dev/null
    "$bin" run --listen 127.0.0.1:0 --log "$log" --process-match "$log" --run-name bench \
        --gpu off --state-dir "$work/state-$n" 2>"$work/sidecar-$n.err" &
    pid=$!
    say "build $n ($bin): sidecar $pid beside job $job, $MINUTES minutes..."
    sleep $((MINUTES * 60))
    addr=$(grep -o 'listening on http://[0-9.:]*' "$work/sidecar-$n.err" | head -n1 | sed 's|.*http://||')
    status=$(curl -s "http://$addr/status" | python3 -c 'import json, sys; s = json.load(sys.stdin)["slurm"] or {}; print(json.dumps({k: s.get(k) for k in ("error", "errors", "asks")}))')
    sdiag | sed -n '/by message type/,/^$/p' | awk -v b="$n" '/count:/ {
        name = $1; split($0, a, "count:"); split(a[2], c, " "); split($0, t, "total_time:");
        printf "| %s | %s | %s | %.1f |\n", b, name, c[1], t[2] / 1000 }'
    echo "| $n | /status slurm | $status | |"
    kill "$pid"
    wait "$pid" || true
    scancel "$job"
done
