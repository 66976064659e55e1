#!/usr/bin/env bash
# Installs the real peers the tests talk to (DESIGN §9): Prometheus and promtool.
# Skips apt when they are already there, so a developer's second run costs nothing.
set -euo pipefail

need=()
command -v prometheus >/dev/null || need+=(prometheus)
command -v promtool >/dev/null || need+=(prometheus)
if [ ${#need[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "missing test peers: ${need[*]}; install them as root:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends prometheus" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
