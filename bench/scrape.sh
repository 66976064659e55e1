#!/usr/bin/env bash
# Scrape benchmark: what a Prometheus scrape of pipeline-pulse costs on a busy node, next to
# node_exporter (the exporter such a node already runs) and mtail (following the same log with
# bench/mtail/run_inference.mtail); then whether scrapes stay fast while pulse catches up on a
# 2 GiB backlog of output files (the catch-up takes the model lock per batch, so scrapes
# interleave with it instead of waiting for it). Last, pulse and node_exporter again behind one
# web config file (TLS 1.3 and basic auth, the same file for both), the bcrypt cache warm.
#
# usage: bench/scrape.sh                      # uses target/release/pipeline-pulse
#        PULSE=/path/to/pipeline-pulse bench/scrape.sh
#
# Settings (environment):
#   PULSE          pipeline-pulse binary          [target/release/pipeline-pulse]
#   MTAIL          mtail binary                   [mtail]
#   NODE_EXPORTER  node_exporter binary           [prometheus-node-exporter]
#   WRK            wrk binary                     [wrk]
#   BENCH_SECONDS  seconds of scraping per target [10]
#   BENCH_DIR      work dir                       [/tmp/pulse-bench]
#
# Each target is scraped back to back by one connection (as one Prometheus would, only without
# the pause between scrapes), with Prometheus's own Accept header. Prints markdown for
# BENCHMARKS.md on stdout, progress on stderr. A measurement, not a test.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MTAIL=${MTAIL:-mtail}
NODE_EXPORTER=${NODE_EXPORTER:-prometheus-node-exporter}
WRK=${WRK:-wrk}
BENCH_SECONDS=${BENCH_SECONDS:-10}
ACCEPT='application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'

for tool in "$MTAIL" "$NODE_EXPORTER" "$WRK" curl openssl; do
    command -v "$tool" >/dev/null ||
        die "no $tool; apt-get install mtail prometheus-node-exporter wrk curl (or set MTAIL, NODE_EXPORTER, WRK)"
done

# --- inputs -------------------------------------------------------------------------------
# The steady state: a 200,000-line log over 6 partitions, 64 MiB of outputs in 4 partitions, and
# 8 simulated GPUs with a process each: the exposition of a busy 8-GPU node.
log=$BENCH_DIR/scrape-run_inference.log
[[ -f $log ]] || "$PYTHON" "$here/gen_log.py" "$log" 200000
small=$BENCH_DIR/scrape-jsonl
ensure_jsonl "$small" 64
# The catch-up: the 2 GiB that bench/outputs.sh uses.
big=$BENCH_DIR/jsonl
ensure_jsonl "$big" 2048
cat "$log" "$small"/*/raw_responses.jsonl "$big"/*/raw_responses.jsonl >/dev/null

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# wait_for URL PATTERN: until the body of URL matches PATTERN (60 s at most).
wait_for() {
    for _ in $(seq 6000); do
        # Not `curl | grep -q`: grep quits at its match, and with pipefail curl's SIGPIPE on a
        # large body would count as a failure.
        local body
        body=$(curl -sf "$1" 2>/dev/null) && grep -Eq "$2" <<<"$body" && return 0
        sleep 0.01
    done
    die "$1 never matched $2"
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# --- steady state -------------------------------------------------------------------------
pulse_port=$(free_port)
"$PULSE" run --listen "127.0.0.1:$pulse_port" --log "$log" \
    --outputs "$small/*/raw_responses.jsonl" --gpu simulated --gpu-processes \
    2>"$BENCH_DIR/scrape-pulse.err" &
pids+=($!)
pulse_pid=$!
# mtail follows from the end of what exists when it looks, even in a file it finds later: it
# gets an empty copy of the log to follow, and the lines are appended once it is watching.
mtail_port=$(free_port)
mtail_log=$BENCH_DIR/scrape-mtail.log
: >"$mtail_log"
"$MTAIL" --progs "$here/mtail" --logs "$mtail_log" --address 127.0.0.1 --port "$mtail_port" \
    --logtostderr 2>"$BENCH_DIR/scrape-mtail.err" &
pids+=($!)
mtail_pid=$!
node_port=$(free_port)
"$NODE_EXPORTER" --web.listen-address="127.0.0.1:$node_port" 2>"$BENCH_DIR/scrape-node.err" &
pids+=($!)
node_pid=$!

say "waiting for the three exporters to have read their inputs..."
grep -q 'Tailing ' "$BENCH_DIR/scrape-mtail.err" 2>/dev/null || sleep 1
for _ in $(seq 500); do grep -q 'Tailing ' "$BENCH_DIR/scrape-mtail.err" && break; sleep 0.01; done
cat "$log" >>"$mtail_log"
wait_for "http://127.0.0.1:$pulse_port/-/ready" .
wait_for "http://127.0.0.1:$pulse_port/metrics" '^pulse_gpus 8'
wait_for "http://127.0.0.1:$mtail_port/metrics" "^log_lines_total\\{.*\\} 200000\$"
wait_for "http://127.0.0.1:$node_port/metrics" '^node_exporter_build_info'

# ms VALUE: wrk's latency (us, ms or s) in milliseconds.
ms() {
    awk -v v="$1" 'BEGIN { n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
        printf "%.3f", (u == "us") ? n / 1000 : (u == "s") ? n * 1000 : n }'
}
# load NAME PID URL SECONDS: scrapes URL back to back; leaves the figures in the arrays below.
declare -A series bytes rps p50 p99 pmax cpu_ms requests
# Extra headers (basic auth) for wrk and curl, and curl's CA; empty until the TLS rows.
auth=() trust=()
load() {
    local name=$1 pid=$2 url=$3 seconds=$4
    say "  $name: ${seconds}s of scrapes"
    local before after
    before=$(cpu_ticks "$pid")
    "$WRK" -t1 -c1 -d"${seconds}s" --latency -H "Accept: $ACCEPT" "${auth[@]}" "$url" >"$BENCH_DIR/scrape-$name.wrk"
    after=$(cpu_ticks "$pid")
    # The exposition as the last scrapes saw it (during a catch-up it grows as files are read).
    curl -sf -H "Accept: $ACCEPT" "${auth[@]}" "${trust[@]}" "$url" >"$BENCH_DIR/scrape-$name.txt"
    series[$name]=$(grep -vc '^#' "$BENCH_DIR/scrape-$name.txt")
    bytes[$name]=$(stat -c %s "$BENCH_DIR/scrape-$name.txt")
    local w=$BENCH_DIR/scrape-$name.wrk
    requests[$name]=$(awk '/requests in/ { print $1 }' "$w")
    rps[$name]=$(awk '/^Requests\/sec/ { printf "%.0f", $2 }' "$w")
    p50[$name]=$(ms "$(awk '$1 == "50%" { print $2 }' "$w")")
    p99[$name]=$(ms "$(awk '$1 == "99%" { print $2 }' "$w")")
    pmax[$name]=$(ms "$(awk '$1 == "Latency" && NF >= 4 { print $4 }' "$w")")
    cpu_ms[$name]=$(calc '%.3f' "($after - $before) * 1000 / $hz / ${requests[$name]}")
    ((requests[$name] > 0)) || die "$name answered no scrape; see $w"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
say "scraping (load average $load_before)..."
load pulse "$pulse_pid" "http://127.0.0.1:$pulse_port/metrics" "$BENCH_SECONDS"
load node_exporter "$node_pid" "http://127.0.0.1:$node_port/metrics" "$BENCH_SECONDS"
load mtail "$mtail_pid" "http://127.0.0.1:$mtail_port/metrics" "$BENCH_SECONDS"
kill "$pulse_pid" "$mtail_pid" "$node_pid"
wait "$pulse_pid" "$mtail_pid" "$node_pid" 2>/dev/null || true
pids=()

# --- during a catch-up --------------------------------------------------------------------
# A fresh sidecar on the 2 GiB of outputs, scraped from the moment it listens, for 2 s of a
# first read that takes about 3 s (bench/outputs.sh); the script says if the read ended first.
catch_port=$(free_port)
started=$EPOCHREALTIME
"$PULSE" run --listen "127.0.0.1:$catch_port" --outputs "$big/*/raw_responses.jsonl" --gpu off \
    2>"$BENCH_DIR/scrape-catchup.err" &
pids+=($!)
catch_pid=$!
wait_for "http://127.0.0.1:$catch_port/-/healthy" .
load catchup "$catch_pid" "http://127.0.0.1:$catch_port/metrics" 2
ready_during=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$catch_port/-/ready")
wait_for "http://127.0.0.1:$catch_port/-/ready" .
ready_after=$(calc '%.1f' "$EPOCHREALTIME - $started")
records=$(curl -sf "http://127.0.0.1:$catch_port/metrics" |
    awk '/^pulse_output_records_total\{/ { s += $2 } END { printf "%d", s }')
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
[[ $ready_during == 503 ]] ||
    say "warning: the catch-up ended before the scrapes did (/-/ready said $ready_during); use a larger backlog"
kill "$catch_pid"
wait "$catch_pid" 2>/dev/null || true
pids=()

# --- behind a web config: TLS and basic auth -----------------------------------------------
tls=$BENCH_DIR/tls
mkdir -p "$tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$tls/tls.key" -out "$tls/tls.crt" 2>/dev/null
# Cost 10, as exporter-toolkit's documentation has it: only the first scrape pays for it.
hash=$(printf 'bench-password\n' | "$PULSE" hash-password --cost 10)
cat >"$tls/web-config.yml" <<WEB
tls_server_config:
  cert_file: tls.crt
  key_file: tls.key
basic_auth_users:
  prometheus: $hash
WEB
auth=(-H "Authorization: Basic $(printf 'prometheus:bench-password' | base64)")
trust=(--cacert "$tls/tls.crt")
pulse_port=$(free_port)
"$PULSE" run --listen "127.0.0.1:$pulse_port" --log "$log" \
    --outputs "$small/*/raw_responses.jsonl" --gpu simulated --gpu-processes \
    --web-config-file "$tls/web-config.yml" 2>"$BENCH_DIR/scrape-pulse-tls.err" &
pids+=($!)
pulse_pid=$!
node_port=$(free_port)
"$NODE_EXPORTER" --web.listen-address="127.0.0.1:$node_port" --web.config.file="$tls/web-config.yml" \
    2>"$BENCH_DIR/scrape-node-tls.err" &
pids+=($!)
node_pid=$!
wait_tls() { # URL PATTERN
    for _ in $(seq 6000); do
        local body
        body=$(curl -sf "${auth[@]}" "${trust[@]}" "$1" 2>/dev/null) && grep -Eq "$2" <<<"$body" && return 0
        sleep 0.01
    done
    die "$1 never matched $2"
}
wait_tls "https://127.0.0.1:$pulse_port/-/ready" .
wait_tls "https://127.0.0.1:$pulse_port/metrics" '^pulse_gpus 8'
wait_tls "https://127.0.0.1:$node_port/metrics" '^node_exporter_build_info'
say "scraping over TLS with basic auth..."
load pulse_tls "$pulse_pid" "https://127.0.0.1:$pulse_port/metrics" "$BENCH_SECONDS"
load node_tls "$node_pid" "https://127.0.0.1:$node_port/metrics" "$BENCH_SECONDS"
tls_version=$(curl -sv "${auth[@]}" "${trust[@]}" -o /dev/null "https://127.0.0.1:$pulse_port/-/healthy" 2>&1 |
    awk '/SSL connection using/ { print $5; exit }')
kill "$pulse_pid" "$node_pid"
wait "$pulse_pid" "$node_pid" 2>/dev/null || true
pids=()

row() { # LABEL NAME: one table row; during the catch-up the CPU is the catch-up's, not the scrapes'
    local cpu=${cpu_ms[$2]} per_series
    per_series=$(calc '%.2f' "$cpu * 1000 / ${series[$2]}")
    [[ $2 == catchup ]] && cpu=– per_series=–
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$1" "${series[$2]}" \
        "$(calc '%.1f' "${bytes[$2]} / 1024")" "${rps[$2]}" "${p50[$2]}" "${p99[$2]}" "${pmax[$2]}" \
        "$cpu" "$per_series"
}

cat <<EOF
- pipeline-pulse: a 200,000-line log (6 partitions, bench/gen_log.py), 64 MiB of outputs in 4
  partitions (bench/gen_jsonl.py), 8 simulated GPUs with per-process memory. mtail: the same log
  with bench/mtail/run_inference.mtail. node_exporter: its default collectors on this machine.
- Each target scraped by \`wrk -t1 -c1 -d${BENCH_SECONDS}s\` with Prometheus's Accept header (one
  connection, scrapes back to back); CPU is the exporter's own user + sys over the run.
- Machine: $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), Linux $(uname -r);
  load average $load_before before, $load_after after.
- $($PULSE --version); node_exporter $("$NODE_EXPORTER" --version 2>&1 | awk 'NR == 1 { print $3 }');
  $("$MTAIL" --version 2>&1 | head -n1); $("$WRK" --version 2>&1 | head -n1 | awk '{ print $1, $2 }').

| target | series | KiB | scrapes/s | p50 ms | p99 ms | max ms | CPU ms/scrape | CPU µs/series |
|---|---:|---:|---:|---:|---:|---:|---:|---:|
$(row pipeline-pulse pulse)
$(row node_exporter node_exporter)
$(row mtail mtail)
$(row 'pipeline-pulse, catching up on 2 GiB' catchup)
$(row 'pipeline-pulse, TLS + basic auth' pulse_tls)
$(row 'node_exporter, TLS + basic auth' node_tls)

| pipeline-pulse vs | scrapes/s | CPU per scrape | CPU per series |
|---|---:|---:|---:|
| node_exporter | $(calc '%.1fx' "${rps[pulse]} / ${rps[node_exporter]}") | $(calc '%.2f' "${cpu_ms[pulse]} / ${cpu_ms[node_exporter]}") | $(calc '%.2f' "(${cpu_ms[pulse]} / ${series[pulse]}) / (${cpu_ms[node_exporter]} / ${series[node_exporter]})") |
| mtail | $(calc '%.1fx' "${rps[pulse]} / ${rps[mtail]}") | $(calc '%.2f' "${cpu_ms[pulse]} / ${cpu_ms[mtail]}") | $(calc '%.2f' "(${cpu_ms[pulse]} / ${series[pulse]}) / (${cpu_ms[mtail]} / ${series[mtail]})") |
| node_exporter, both behind TLS + basic auth | $(calc '%.1fx' "${rps[pulse_tls]} / ${rps[node_tls]}") | $(calc '%.2f' "${cpu_ms[pulse_tls]} / ${cpu_ms[node_tls]}") | $(calc '%.2f' "(${cpu_ms[pulse_tls]} / ${series[pulse_tls]}) / (${cpu_ms[node_tls]} / ${series[node_tls]})") |

- TLS + basic auth: one web config file (a P-256 certificate, one bcrypt user at cost 10) for both;
  $tls_version, one kept-alive connection, so the handshake and the one bcrypt check are paid once
  and the cache answers the rest. TLS costs pulse $(calc '%.3f' "${cpu_ms[pulse_tls]} - ${cpu_ms[pulse]}") ms of CPU per scrape
  (${cpu_ms[pulse_tls]} against ${cpu_ms[pulse]}), node_exporter $(calc '%.3f' "${cpu_ms[node_tls]} - ${cpu_ms[node_exporter]}") ms.

- During the catch-up: ${requests[catchup]} scrapes in 2 s, p99 ${p99[catchup]} ms against
  ${p99[pulse]} ms at rest; /-/ready said $ready_during when they ended, and 200 after ${ready_after} s,
  with $records records read.
EOF
