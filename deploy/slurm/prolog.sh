#!/bin/bash
# pipeline-pulse for every job on a node, started by slurmd (docs/slurm.md):
#   slurm.conf: Prolog=/etc/slurm/pipeline-pulse-prolog.sh  Epilog=/etc/slurm/pipeline-pulse-epilog.sh
# It runs as root at the job's start on each of its nodes. It asks the controller about the job
# once (`scontrol show job`, one single-job lookup) and writes what every sidecar on the node
# would otherwise ask for into a node-local file, $RUNTIME/slurm/job-ID.env (the job, its
# array, its start, its end and its time limit; docs/slurm.md#the-prolog-file), as jobstats'
# and dcgm-exporter's job files do. Then it starts a sidecar beside the job, as the job's user,
# on the job's working directory (`--run-dir`: discovery finds the driver, its logs, outputs
# and server there, and the job from the driver's environment), on a free port written where
# Prometheus' file_sd reads it. A prolog that fails drains the node: this one never fails; a
# sidecar that cannot start is said in its log and nothing more.
set -u
[ -n "${SLURM_JOB_ID:-}" ] || exit 0
PULSE=${PULSE:-/usr/bin/pipeline-pulse}
RUNTIME=${PULSE_RUNTIME:-/run/pipeline-pulse}
FILE_SD=${PULSE_FILE_SD:-}
mkdir -p "$RUNTIME/slurm" || exit 0

# This job's record alone (the id of an array's last task is the array's: its records all
# come), with times as Unix seconds.
record=$(SLURM_TIME_FORMAT=%s TZ=UTC scontrol --local -o show job "$SLURM_JOB_ID" 2>/dev/null |
    grep "^JobId=$SLURM_JOB_ID ")
field() { printf '%s\n' "$record" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n1; }
# TimeLimit is [days-]hours:minutes:seconds, or UNLIMITED: minutes, or empty.
minutes() {
    case $1 in *[0-9]:[0-9]*) ;; *) return 0 ;; esac
    local d=0 t=$1 h m s
    case $t in *-*) d=${t%%-*}; t=${t#*-} ;; esac
    IFS=: read -r h m s <<<"$t"
    echo $(((10#$d * 24 + 10#$h) * 60 + 10#$m + (10#${s:-0} > 0)))
}
number() { case $1 in '' | *[!0-9]*) ;; *) echo "$1" ;; esac; }
if [ -n "$record" ]; then
    job_file="$RUNTIME/slurm/job-$SLURM_JOB_ID.env"
    {
        echo "# Written by pipeline-pulse's prolog at the job's start (docs/slurm.md#the-prolog-file)."
        echo "SLURM_JOB_ID=$SLURM_JOB_ID"
        echo "SLURM_ARRAY_JOB_ID=${SLURM_ARRAY_JOB_ID:-}"
        echo "SLURM_ARRAY_TASK_ID=${SLURM_ARRAY_TASK_ID:-}"
        echo "SLURM_RESTART_COUNT=$(number "$(field Restarts)")"
        echo "START_TIME=$(number "$(field StartTime)")"
        echo "END_TIME=$(number "$(field EndTime)")"
        echo "TIME_LIMIT=$(minutes "$(field TimeLimit)")"
    } >"$job_file.tmp" && chmod 644 "$job_file.tmp" && mv "$job_file.tmp" "$job_file"
fi

[ -x "$PULSE" ] || exit 0
workdir=$(field WorkDir)
[ -d "$workdir" ] || exit 0
run="slurm-${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])') || exit 0
gid=$(id -g "$SLURM_JOB_USER") || exit 0

# setpriv execs: the pid kept is the sidecar's. Its own session, so the job's end does not take it.
setsid setpriv --reuid "$SLURM_JOB_UID" --regid "$gid" --init-groups \
    "$PULSE" run --run-dir "$workdir" --run-name "$run" --web.listen-address "0.0.0.0:$port" \
    --slurm-job-dir "$RUNTIME/slurm" \
    >"$RUNTIME/$SLURM_JOB_ID.log" 2>&1 </dev/null &
echo $! >"$RUNTIME/$SLURM_JOB_ID.pid"

if [ -n "$FILE_SD" ]; then
    sd="$FILE_SD/pipeline-pulse-$SLURM_JOB_ID.json"
    printf '[{"targets": ["%s:%s"], "labels": {"slurm_job_id": "%s", "run": "%s"}}]\n' \
        "$(hostname -s)" "$port" "$SLURM_JOB_ID" "$run" >"$sd.tmp" && mv "$sd.tmp" "$sd"
fi
exit 0
