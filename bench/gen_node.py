#!/usr/bin/env python3
"""Today's 50-partition node, quiet: DIR/run/prepared/Pnn/raw_responses.jsonl with 1,000
records each, a run_inference log that stopped mid-run (DIR/run/run.log), and the scripted
NVML library's eight GPUs (DIR/nvml.json). Shared by bench/idle.sh and bench/many_files.sh.

usage: gen_node.py DIR
"""
import json
import os
import sys

work = sys.argv[1]
record = {"text": "x" * 400, "meta_info": {"completion_tokens": 120, "finish_reason": {"type": "stop"}}}
line = json.dumps(record) + "\n"
log = ["Model: /shared/model", "Processing: P00 (SHORT)", "P00: 1000 prompts"]
for p in range(50):
    d = f"{work}/run/prepared/P{p:02d}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/raw_responses.jsonl", "w") as f:
        f.write(line * 1000)
log += [f"  {n}/1000 (0 err) 2.0 req/s avg_comp=120tok ETA=1.0h" for n in range(50, 550, 50)]
open(f"{work}/run/run.log", "w").write("\n".join(log) + "\n")
gpus = [{"name": "NVIDIA H200", "uuid": f"GPU-0000000{i}-idle", "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
         "utilization": 80, "memory_utilization": 30, "memory_total": 150754820096,
         "memory_used": 90000000000, "temperature": 60, "power_mw": 500000,
         "power_limit_mw": 700000, "sm_clock_mhz": 1900, "processes": []} for i in range(8)]
json.dump({"driver_version": "550.54.15", "gpus": gpus}, open(f"{work}/nvml.json", "w"))
