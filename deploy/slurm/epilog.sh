#!/bin/bash
# Stops the sidecar deploy/slurm/prolog.sh started for this job (docs/slurm.md) and removes the
# job's file the prolog wrote. The job's processes are gone by now; SIGTERM lets the sidecar ask
# the controller how the job ended (a time limit, a cancel, a requeue), unless its driver's exit
# already told it, tell it, and save its state: up to 15 s, then SIGKILL.
set -u
[ -n "${SLURM_JOB_ID:-}" ] || exit 0
RUNTIME=${PULSE_RUNTIME:-/run/pipeline-pulse}
FILE_SD=${PULSE_FILE_SD:-}
pidfile="$RUNTIME/$SLURM_JOB_ID.pid"
[ -n "$FILE_SD" ] && rm -f "$FILE_SD/pipeline-pulse-$SLURM_JOB_ID.json"
if [ ! -f "$pidfile" ]; then
    rm -f "$RUNTIME/slurm/job-$SLURM_JOB_ID.env"
    exit 0
fi
pid=$(cat "$pidfile")
if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 150); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
fi
rm -f "$pidfile" "$RUNTIME/slurm/job-$SLURM_JOB_ID.env"
exit 0
