#!/bin/bash
# pipeline-pulse for every job on a node, started by slurmd (docs/slurm.md):
#   slurm.conf: Prolog=/etc/slurm/pipeline-pulse-prolog.sh  Epilog=/etc/slurm/pipeline-pulse-epilog.sh
# It runs as root at the job's start on each of its nodes: it starts a sidecar beside the job,
# as the job's user, on the job's working directory (`--run-dir`: discovery finds the driver,
# its logs, outputs and server there, and the job from the driver's environment), on a free port
# written where Prometheus' file_sd reads it. A prolog that fails drains the node: this one
# never fails; a sidecar that cannot start is said in its log and nothing more.
set -u
[ -n "${SLURM_JOB_ID:-}" ] || exit 0
PULSE=${PULSE:-/usr/bin/pipeline-pulse}
RUNTIME=${PULSE_RUNTIME:-/run/pipeline-pulse}
FILE_SD=${PULSE_FILE_SD:-}
[ -x "$PULSE" ] || exit 0
mkdir -p "$RUNTIME" || exit 0

workdir=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n 's/^WorkDir=//p')
[ -d "$workdir" ] || exit 0
run="slurm-${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])') || exit 0
gid=$(id -g "$SLURM_JOB_USER") || exit 0

# setpriv execs: the pid kept is the sidecar's. Its own session, so the job's end does not take it.
setsid setpriv --reuid "$SLURM_JOB_UID" --regid "$gid" --init-groups \
    "$PULSE" run --run-dir "$workdir" --run-name "$run" --web.listen-address "0.0.0.0:$port" \
    >"$RUNTIME/$SLURM_JOB_ID.log" 2>&1 </dev/null &
echo $! >"$RUNTIME/$SLURM_JOB_ID.pid"

if [ -n "$FILE_SD" ]; then
    sd="$FILE_SD/pipeline-pulse-$SLURM_JOB_ID.json"
    printf '[{"targets": ["%s:%s"], "labels": {"slurm_job_id": "%s", "run": "%s"}}]\n' \
        "$(hostname -s)" "$port" "$SLURM_JOB_ID" "$run" >"$sd.tmp" && mv "$sd.tmp" "$sd"
fi
exit 0
