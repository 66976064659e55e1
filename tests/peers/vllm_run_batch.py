"""A batch driver as users write one around vLLM's `run_batch`: per partition an OpenAI Batch
input file (one request a line), then one `python -m vllm.entrypoints.openai.run_batch` process
that loads the model, answers every line and writes the output file when all are done. The
driver's own lines and everything run_batch prints go to one log, RUN_DIR/run.log.

usage: vllm_run_batch.py RUN_DIR MODEL
"""
import json
import subprocess
import sys
from pathlib import Path

run_dir, model = Path(sys.argv[1]), sys.argv[2]
# run_batch draws its bar at most every 5 s: partitions long enough to show a frame between
# 0% and 100% on two cores.
PARTITIONS = {"P1": 40, "P2": 24}
TOPICS = ["a lighthouse keeper", "a hash map in Python", "CUDA out of memory", "the lazy dog"]
# The engine settings the tests serve the tiny model with (tests/it/vllm.rs).
ENGINE = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "256",
          "--max-num-seqs", "4", "--num-gpu-blocks-override", "5"]


def request(name, i):
    text = f"Write a short story about {TOPICS[i % len(TOPICS)]}. #{name}-{i}"
    # Chat only: vLLM 0.32's run_batch has no /v1/completions, and a single such line fails the
    # whole file (a ValidationError, exit 1, before any request runs, no output file).
    return {"custom_id": f"{name}-{i}", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": text}],
                     "max_tokens": 200, "temperature": 0}}  # greedy: the same text every run


with open(run_dir / "run.log", "a", buffering=1) as log:
    log.write(f"Model: {model}\n")
    for name, count in PARTITIONS.items():
        folder = run_dir / "batches" / name
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "input.jsonl", "w") as f:
            for i in range(count):
                f.write(json.dumps(request(name, i)) + "\n")
        log.write(f"Processing: {name} ({count} requests)\n")
        done = subprocess.run(
            [sys.executable, "-m", "vllm.entrypoints.openai.run_batch",
             "-i", str(folder / "input.jsonl"), "-o", str(folder / "output.jsonl"),
             "--model", model, *ENGINE],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.write(f"Done: {name} (exit {done.returncode})\n")
        if done.returncode:
            sys.exit(done.returncode)
    log.write("All partitions complete.\n")
