#!/bin/bash
# A pipeline-pulse action (docs/alerts.md#actions): ends the inference server so that its
# supervisor (systemd's Restart=, Kubernetes, a wrapper loop) starts it again. SIGTERM first,
# SIGKILL to what is left after GRACE seconds (an engine wedged in a collective ignores
# SIGTERM), to the engine and every process it started. The pid is the one the sidecar found; it is checked to still be an engine (ENGINE_MATCH,
# a pattern of its command line), so a pid reused since is never killed.
#   command = ["/usr/local/lib/pipeline-pulse/actions/kill-engine.sh"]
# The sidecar's user must be the engine's (or root) to signal it.
set -u
PID=${1:-${PULSE_SERVER_PID:-}}
MATCH=${ENGINE_MATCH:-sglang|vllm}
GRACE=${GRACE:-20}
if [ -z "$PID" ]; then
    echo "no inference server pid is known (discovery found none): nothing killed" >&2
    exit 1
fi
cmdline=$(tr '\0' ' ' <"/proc/$PID/cmdline" 2>/dev/null) || cmdline=""
if ! printf '%s' "$cmdline" | grep -Eq -- "$MATCH"; then
    echo "pid $PID is no longer an engine (${cmdline:-gone}): nothing killed" >&2
    exit 1
fi
# The engine's processes, its own first: SGLang's schedulers and vLLM's EngineCore are its
# children, and one left behind holds the GPUs' memory from the engine that replaces it.
tree() {
    echo "$1"
    for child in $(pgrep -P "$1"); do tree "$child"; done
}
pids=$(tree "$PID")
echo "${PULSE_ALERT:-an alert} (${PULSE_SUMMARY:-}): SIGTERM to the engine, pid $PID: $cmdline"
kill -TERM "$PID" || exit 1
for _ in $(seq "$GRACE"); do
    alive=""
    for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
    [ -n "$alive" ] || { echo "the engine and its processes ended"; exit 0; }
    sleep 1
done
echo "still there after ${GRACE}s:$alive: SIGKILL"
# shellcheck disable=SC2086
kill -KILL $alive 2>/dev/null
exit 0
