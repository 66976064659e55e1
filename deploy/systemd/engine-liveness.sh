#!/bin/bash
# Restarts the inference engine's unit when pipeline-pulse judges it hung or down
# (docs/alerts.md#liveness): three 503s from /-/engine in a row, 30 s apart (the timer).
# A sidecar that does not answer restarts nothing: no verdict is no verdict.
#   ENGINE_UNIT=sglang.service PULSE_URL=http://127.0.0.1:9721
set -u
UNIT=${ENGINE_UNIT:-sglang.service}
URL=${PULSE_URL:-http://127.0.0.1:9721}/-/engine
COUNT=${STATE_DIRECTORY:-/var/lib/engine-liveness}/failures
mkdir -p "$(dirname "$COUNT")"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$URL")
case "$code" in
    200) echo 0 >"$COUNT" ;;
    503)
        n=$(($(cat "$COUNT" 2>/dev/null || echo 0) + 1))
        echo "$n" >"$COUNT"
        if [ "$n" -ge 3 ]; then
            echo "pipeline-pulse judged $UNIT hung or down 3 times in a row: $(curl -s --max-time 10 "$URL")"
            echo 0 >"$COUNT"
            systemctl restart "$UNIT"
        fi
        ;;
    *) echo "no verdict from $URL (answered ${code:-nothing}): nothing done" ;;
esac
