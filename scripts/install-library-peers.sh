#!/usr/bin/env bash
# Installs the three data-generation libraries people write runs with, as real test peers: each
# in its own virtualenv kept outside the repository (their pins conflict with one another), once
# per machine:
#   datatrove 0.10.1 (InferenceRunner)   ${PULSE_DATATROVE_VENV:-/var/cache/pipeline-pulse/datatrove-venv}
#   bespokelabs-curator 0.1.31           ${PULSE_CURATOR_VENV:-/var/cache/pipeline-pulse/curator-venv}
#   distilabel 1.5.3 with [openai]       ${PULSE_DISTILABEL_VENV:-/var/cache/pipeline-pulse/distilabel-venv}
# The run scripts in tests/peers/{datatrove,curator,distilabel}_gen.py use them against a vLLM
# server; nothing is fetched from a model hub.
#
# Every version is pinned in scripts/library-peers/<library>.txt, compiled by uv from the
# matching .in (the command is in each .txt's header), so a second machine gets the same
# packages from PyPI. datatrove's `inference` extra also pulls vLLM, SGLang and bitsandbytes to
# start a model server of its own (several GB of CUDA wheels); the runs here talk to a server
# that is already up (server_type="endpoint"), so datatrove.in lists the rest of that extra.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
locks="$here/library-peers"
python=${PYTHON:-python3}
UV_VERSION=0.13.10

install_peer() {
    local name=$1 version=$2 var=$3 venv=$4
    local lock="$locks/$name.txt"
    # The marker names the lock's content: a new pin installs again.
    local sum
    sum=$(sha256sum "$lock" | cut -c1-12)
    local marker="$venv/.pulse-$name-$version-$sum"
    [ -f "$marker" ] && return 0

    local parent
    parent=$(dirname "$venv")
    if ! mkdir -p "$parent" 2>/dev/null || [ ! -w "$parent" ]; then
        # The tests that need it then fail and say how to install it.
        echo "cannot install $name into $venv: run scripts/install-library-peers.sh as root, or set $var to a folder of yours" >&2
        return 0
    fi
    echo "installing $name $version into $venv (once per machine)" >&2
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    "$venv/bin/python" -m pip --disable-pip-version-check -q install "uv==$UV_VERSION"
    # --no-deps: the lock already holds every requirement, resolved; nothing else comes in.
    "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --no-deps -r "$lock"
    "$venv/bin/uv" pip check --quiet --python "$venv/bin/python" >&2 || true
    rm -f "$venv"/.pulse-"$name"-*
    touch "$marker"
    echo "$name $version ready: $venv/bin/python" >&2
}

install_peer datatrove 0.10.1 PULSE_DATATROVE_VENV "${PULSE_DATATROVE_VENV:-/var/cache/pipeline-pulse/datatrove-venv}"
install_peer curator 0.1.31 PULSE_CURATOR_VENV "${PULSE_CURATOR_VENV:-/var/cache/pipeline-pulse/curator-venv}"
install_peer distilabel 1.5.3 PULSE_DISTILABEL_VENV "${PULSE_DISTILABEL_VENV:-/var/cache/pipeline-pulse/distilabel-venv}"
