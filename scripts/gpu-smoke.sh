#!/usr/bin/env bash
# The NVML path on a real GPU node: runs the sidecar with the real libnvidia-ml for 60 s and,
# every 5 s, compares every GPU figure it exports with `nvidia-smi --query-gpu` taken at the
# same moment; then times each NVML query and registers the XID event set (`gpu-check`).
#
# usage: scripts/gpu-smoke.sh            # uses target/release/pipeline-pulse
#        PULSE=/path/to/pipeline-pulse DURATION=60 scripts/gpu-smoke.sh
#
# Tolerances (the two tools sample at slightly different moments and windows):
#   utilization, memory utilization: 15 points; memory used: 2% of total; memory total: 1 MiB
#   (nvidia-smi rounds to MiB); temperature: 3 C; power: 15% or 20 W; power limit: 1 W;
#   SM clock: 10%. Name, UUID and PCI bus id: exact.
# Prints a markdown table per GPU and figure (worst difference seen, within tolerance or not)
# and exits 1 if any figure was out of tolerance.
set -euo pipefail
cd "$(dirname "$0")/.."
PULSE=${PULSE:-target/release/pipeline-pulse}
DURATION=${DURATION:-60}
PORT=${PORT:-19721}
command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: this needs a GPU node" >&2; exit 2; }
[[ -x $PULSE ]] || { echo "$PULSE not built: cargo build --release" >&2; exit 2; }
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
"$PULSE" run --gpu on --gpu-interval 1s --listen "127.0.0.1:$PORT" 2>"$work/sidecar.log" &
pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/-/ready" >/dev/null && break; sleep 0.2; done
end=$((SECONDS + DURATION))
while ((SECONDS < end)); do
  curl -fs "http://127.0.0.1:$PORT/metrics" >"$work/m.$SECONDS"
  nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw,power.limit,clocks.sm \
    --format=csv,noheader,nounits >"$work/s.$SECONDS"
  sleep 5
done
status=0
python3 - "$work" <<'PY' || status=$?
import glob, os, re, sys
work = sys.argv[1]
tol = {  # figure: (metric, nvidia-smi column, scale to the metric's unit, tolerance function)
    "utilization": ("pulse_gpu_utilization_ratio", 4, 0.01, lambda s, t: 0.15),
    "memory utilization": ("pulse_gpu_memory_utilization_ratio", 5, 0.01, lambda s, t: 0.15),
    "memory used": ("pulse_gpu_memory_used_bytes", 6, 2**20, lambda s, t: 0.02 * t["total"]),
    "memory total": ("pulse_gpu_memory_total_bytes", 7, 2**20, lambda s, t: 2**20),
    "temperature": ("pulse_gpu_temperature_celsius", 8, 1, lambda s, t: 3),
    "power": ("pulse_gpu_power_watts", 9, 1, lambda s, t: max(20, 0.15 * s)),
    "power limit": ("pulse_gpu_power_limit_watts", 10, 1, lambda s, t: 1),
    "sm clock": ("pulse_gpu_sm_clock_hertz", 11, 1e6, lambda s, t: 0.1 * s),
}
worst, bad, samples = {}, False, 0
for mfile in sorted(glob.glob(f"{work}/m.*")):
    sfile = mfile.replace("/m.", "/s.")
    metrics = open(mfile).read()
    for row in open(sfile).read().strip().splitlines():
        cols = [c.strip() for c in row.split(",")]
        gpu, uuid = cols[0], cols[1]
        info = re.search(r'pulse_gpu_info\{gpu="%s",uuid="([^"]*)",name="([^"]*)",pci_bus_id="([^"]*)"' % gpu, metrics)
        if not info or info.group(1) != uuid or info.group(2) != cols[2] or info.group(3).lower() != cols[3].lower():
            print(f"GPU {gpu}: inventory differs: {info and info.groups()} vs {cols[1:4]}"); bad = True
        total = float(cols[7]) * 2**20
        for name, (metric, col, scale, t) in tol.items():
            m = re.search(r'^%s\{gpu="%s",uuid="[^"]*"\} (\S+)$' % (metric, gpu), metrics, re.M)
            if not m or cols[col] in ("[N/A]", "N/A", "[Not Supported]"):
                continue
            ours, theirs = float(m.group(1)), float(cols[col]) * scale
            diff = abs(ours - theirs)
            allowed = t(theirs, {"total": total})
            key = (gpu, name)
            worst[key] = max(worst.get(key, (0, allowed))[0], diff), allowed
            bad |= diff > allowed
    samples += 1
print(f"{samples} samples\n\n| GPU | figure | worst difference | tolerance | ok |\n|---|---|---:|---:|---|")
for (gpu, name), (diff, allowed) in sorted(worst.items()):
    print(f"| {gpu} | {name} | {diff:.4g} | {allowed:.4g} | {'yes' if diff <= allowed else 'NO'} |")
sys.exit(1 if bad else 0)
PY
echo
"$PULSE" gpu-check
exit $status
