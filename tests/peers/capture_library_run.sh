#!/usr/bin/env bash
# Runs one library's generation script (tests/peers/<library>_gen.py) against a vLLM server as a
# user would (nohup, stdout and stderr into RUN_DIR/logs/gen.log) and watches its folder every 2 s
# (tests/peers/watch_run.py) into RUN_DIR.growth.txt.
#
#   tests/peers/capture_library_run.sh LIBRARY RUN_DIR BASE_URL MODEL [PROMPTS] [MAX_TOKENS] [ARG...]
#
# ARGs go to the generation script as they are (datatrove_gen.py --metric-interval 2).
# LIBRARY is datatrove, curator or distilabel; its virtualenv comes from
# scripts/install-library-peers.sh. The samples in tests/testdata/libraries/ were made with it
# (their README.md says how).
set -euo pipefail
cd "$(dirname "$0")/../.."

lib=$1 run=$2 base=$3 model=$4 prompts=${5:-40} max_tokens=${6:-8}
shift $(($# < 6 ? $# : 6))
case "$lib" in
datatrove) venv=${PULSE_DATATROVE_VENV:-/var/cache/pipeline-pulse/datatrove-venv} ;;
curator) venv=${PULSE_CURATOR_VENV:-/var/cache/pipeline-pulse/curator-venv} ;;
distilabel) venv=${PULSE_DISTILABEL_VENV:-/var/cache/pipeline-pulse/distilabel-venv} ;;
*)
    echo "usage: $0 datatrove|curator|distilabel RUN_DIR BASE_URL MODEL [PROMPTS] [MAX_TOKENS]" >&2
    exit 2
    ;;
esac
port=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlparse(sys.argv[1]).port)' "$base")
gen=$PWD/tests/peers/${lib}_gen.py
rm -rf "$run" "$run.home"
mkdir -p "$run/logs"
start=$(date +%s.%N)
(
    cd "$run"
    # HOME too: the libraries keep caches under ~/.cache unless told otherwise.
    HOME=$run.home nohup "$venv/bin/python" "$gen" --base-url "$base" --model "$model" --out "$run" \
        --subsets alpha,beta --prompts "$prompts" --max-tokens "$max_tokens" "$@" >logs/gen.log 2>&1 &
    echo $! >"$run.pid"
)
pid=$(cat "$run.pid")
"$venv/bin/python" tests/peers/watch_run.py --pid "$pid" --run "$run" --port "$port" >"$run.growth.txt"

end=$(date +%s.%N)
echo "$lib: driver $pid ran $(python3 -c "print(round($end - $start, 1))") s; log $run/logs/gen.log, growth $run.growth.txt" >&2
