#!/bin/bash
# A pipeline-pulse action (docs/alerts.md#actions): saves `py-spy dump` of the driver and the
# inference server beside the run, in RUN_DIR/pulse-stacks/, one file per process and alert,
# for the post-mortem after the run was restarted. The sidecar takes the stacks itself for its
# alert (docs/alerts.md#stacks); this keeps every one, with the locals, where the run's people look.
#   command = ["/usr/local/lib/pipeline-pulse/actions/py-spy-dump.sh"]
# The sidecar's user needs ptrace rights on the processes and write access to the run folder.
set -u
DIR=${1:-${PULSE_RUN_DIR:-}}
PY_SPY=${PY_SPY:-py-spy}
if [ -z "$DIR" ]; then
    echo "no run folder is known (give it as the first argument, or run with --run-dir)" >&2
    exit 1
fi
out="$DIR/pulse-stacks"
mkdir -p "$out" || exit 1
stamp=$(date -u +%Y%m%dT%H%M%SZ)
status=0
for role in driver server; do
    if [ "$role" = driver ]; then pid=${PULSE_DRIVER_PID:-}; else pid=${PULSE_SERVER_PID:-}; fi
    [ -n "$pid" ] || continue
    file="$out/$stamp-${PULSE_ALERT:-alert}-$role-$pid.txt"
    if "$PY_SPY" dump --locals --pid "$pid" >"$file" 2>&1; then
        echo "saved $file"
    else
        echo "py-spy could not read $role pid $pid: see $file" >&2
        status=1
    fi
done
exit $status
