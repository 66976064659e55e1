#!/usr/bin/env python3
"""A sharded run folder: PARTITIONS partition folders of SHARDS JSONL files of RECORDS records
each (prepared/P07/shard-00013.jsonl), beside a run_inference progress log. Prints the number
of records written.

usage: gen_shards.py DIR [PARTITIONS=40] [SHARDS=250] [RECORDS=10]
"""
import json
import os
import sys

def main():
    root = sys.argv[1]
    partitions = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    shards = int(sys.argv[3]) if len(sys.argv) > 3 else 250
    records = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    total = 0
    for p in range(partitions):
        folder = os.path.join(root, "prepared", f"P{p:02d}")
        os.makedirs(folder, exist_ok=True)
        for s in range(shards):
            with open(os.path.join(folder, f"shard-{s:05d}.jsonl"), "w") as f:
                for r in range(records):
                    rec = {"id": f"P{p:02d}-{s:05d}-{r:03d}", "text": "x" * 40,
                           "meta_info": {"completion_tokens": 12, "finish_reason": {"type": "stop"}}}
                    f.write(json.dumps(rec) + "\n")
                    total += 1
    with open(os.path.join(root, "run.log"), "w") as log:
        log.write("Model: /models/tiny\n")
        for p in range(partitions):
            n = shards * records
            log.write(f"Processing: P{p:02d} (SHORT)\nP{p:02d}: {n} prompts\n")
            log.write(f"  {n}/{n} (0 err) 10.0 req/s avg_comp=12tok ETA=0s\n")
    print(total)

if __name__ == "__main__":
    main()
