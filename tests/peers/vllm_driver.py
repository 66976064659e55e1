"""A batch driver as the tests' users run one: sends PROMPTS requests to a vLLM server's
OpenAI API, CONCURRENCY at a time, and writes what run_inference.py writes: a progress log
(RUN_DIR/run.log) and one JSONL record per response (RUN_DIR/outputs/B1.jsonl), for the
partition PULSE_PARTITION names (B1 unless it is set).

PULSE_RETRY=1 makes it retry a failed request (a second apart) until it is answered, as the
seed's driver does while its server restarts, instead of writing an error record;
PULSE_MORE=1 leaves out "All partitions complete.": the run goes on with another partition, as
the seed's driver does between them. PULSE_PACE=N starts at most N requests a second, so a partition outlasts the faults a test
stages in it however fast the machine is.

usage: vllm_driver.py RUN_DIR PORT MODEL PROMPTS CONCURRENCY MAX_TOKENS
"""
import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

run_dir, port, model = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
prompts, concurrency, max_tokens = (int(a) for a in sys.argv[4:7])
(run_dir / "outputs").mkdir(parents=True, exist_ok=True)
log = open(run_dir / "run.log", "a", buffering=1)
part = os.environ.get("PULSE_PARTITION", "B1")
out = open(run_dir / "outputs" / f"{part}.jsonl", "a", buffering=1)
lock = threading.Lock()
state = {"next": 0, "done": 0, "errors": 0, "tokens": 0, "failing": 0}
# As drivers do, it gives up once the server keeps failing: the run is then unfinished.
GIVE_UP_AFTER = 20
RETRY = os.environ.get("PULSE_RETRY") == "1"
PACE = float(os.environ.get("PULSE_PACE", "0"))
started = time.time()

log.write(f"Model: {model}\nProcessing: {part} (CODE)\n{part}: {prompts} prompts\n")
log.write(f"Running {prompts} requests (concurrency={concurrency}, max_tokens={max_tokens})...\n")

# A coding prompt that quotes a crash, as the seed's coding datasets do.
PROMPT = "Fix this:\nTraceback (most recent call last):\n  File \"train.py\"\ntorch.OutOfMemoryError: CUDA out of memory"


def one(i):
    body = json.dumps({
        "model": model, "prompt": f"{PROMPT} #{i}", "max_tokens": max_tokens,
        "ignore_eos": True, "temperature": 1.0,
    }).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            reply = json.load(r)
        tokens = reply["usage"]["completion_tokens"]
        record = {"id": f"{part}-{i}", "content": reply["choices"][0]["text"],
                  "finish_reason": reply["choices"][0]["finish_reason"],
                  "usage": reply["usage"]}
        return tokens, record
    except Exception as e:  # the server died or refused: an error record, as drivers write
        return None, {"id": f"{part}-{i}", "error": str(e)}


def answered(i):
    while True:
        tokens, record = one(i)
        if tokens is not None or not RETRY:
            return tokens, record
        time.sleep(1)


def worker():
    while True:
        with lock:
            if state["next"] >= prompts:
                return
            state["next"] += 1
            i = state["next"]
            if PACE:
                time.sleep(max(0.0, started + i / PACE - time.time()))
        tokens, record = answered(i)
        with lock:
            if state["failing"] >= GIVE_UP_AFTER:
                return
            state["done"] += 1
            if tokens is None:
                state["errors"] += 1
                state["failing"] += 1
            else:
                state["tokens"] += tokens
                state["failing"] = 0
            out.write(json.dumps(record) + "\n")
            d = state["done"]
            if d % 4 == 0 or d == prompts:
                rps = d / max(time.time() - started, 1e-3)
                avg = state["tokens"] / max(d - state["errors"], 1)
                eta = (prompts - d) / rps
                log.write(f"  {d}/{prompts} ({state['errors']} err) {rps:.1f} req/s avg_comp={avg:.0f}tok ETA={eta:.0f}s\n")


threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if state["failing"] >= GIVE_UP_AFTER:
    log.write(f"Traceback (most recent call last):\nConnectionError: the server failed {GIVE_UP_AFTER} requests in a row\n")
    sys.exit(1)
log.write(f"Done: {part} ({state['done']} responses)\n")
if os.environ.get("PULSE_MORE") != "1":
    log.write("All partitions complete.\n")
