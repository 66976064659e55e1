#!/bin/bash
# A pipeline-pulse action (docs/alerts.md#actions): restarts the SGLang or vLLM server's systemd
# unit when the sidecar pages ServerHung or ServerDown. The restart is queued (--no-block): an
# engine that loads its weights for minutes must not outlast the action's timeout, and the
# sidecar sees it come back by itself (a starting server is never down).
#   command = ["/usr/local/lib/pipeline-pulse/actions/restart-engine-unit.sh", "sglang.service"]
# The sidecar's user runs it: allow that user to restart this one unit (deploy/actions/README.md).
set -eu
UNIT=${1:-${ENGINE_UNIT:-sglang.service}}
echo "${PULSE_ALERT:-an alert} on ${PULSE_HOST:-this node} (${PULSE_SUMMARY:-}): restarting $UNIT"
systemctl --no-block restart "$UNIT"
