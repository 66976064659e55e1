#!/usr/bin/env python3
"""Writes a synthetic `run_inference` progress log for bench/ingest.sh.

usage: gen_log.py OUT [LINES]

The shape follows a real multi-partition batch-inference run: a banner, then for each
partition a `Processing:` header block followed by a few hundred thousand progress lines
(one every 50 completions, as run_inference.py prints them), with about 2% of lines noise that no
parser should match (warnings, retry notices, Python tracebacks). One partition is restarted
part-way, so the count goes backwards once, as it does after a crash-and-resume.

The output is deterministic (fixed seed) and has exactly LINES lines, so both tools' line
counters can be checked against it.
"""

import random
import sys

PARTITIONS = [
    # name, mode, share of the progress lines
    ("B1_glaive", "SHORT", 0.22),
    ("B2_opencodeinstruct", "SHORT", 0.18),
    ("B3_longform", "LONG", 0.15),
    ("B4_mathinstruct", "SHORT", 0.20),
    ("B5_multiturn", "LONG", 0.13),
    ("B6_toolcalls", "SHORT", 0.12),
]
STEP = 50  # completions between progress lines
NOISE = 0.01  # chance of a noise event; a traceback is 6 lines, so ~2% of lines are noise
MODEL = "/shared/kimi-k2.5-int4"

WARNINGS = [
    "WARNING: request {n} timed out after 600s, retrying (attempt 2/3)",
    "WARNING: server returned 503, backing off 5s",
    "[rank0]: NCCL watchdog heartbeat ok",
    "INFO:httpx:HTTP Request: POST http://127.0.0.1:8000/v1/completions \"HTTP/1.1 200 OK\"",
    "Token indices sequence length is longer than the specified maximum sequence length for this model ({n} > 131072)",
]
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/opt/pipeline/run_inference.py", line 212, in worker',
    "    resp = await client.post(url, json=payload, timeout=600)",
    '  File "/usr/lib/python3/dist-packages/httpx/_client.py", line 1574, in send',
    "    raise mapped_exc(message) from exc",
    "httpx.ReadTimeout: timed out",
]


def fmt_eta(seconds):
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 60:
        return f"{seconds / 60:.0f}m"
    return f"{seconds:.0f}s"


def flush(f, lines):
    if lines:
        f.write("\n".join(lines))
        f.write("\n")
        lines.clear()


def main():
    out = sys.argv[1]
    total = int(sys.argv[2]) if len(sys.argv) > 2 else 2_000_000
    rng = random.Random(20240607)
    lines = []
    emit = lines.append
    budget = total  # lines still to write; the last partition absorbs rounding

    def banner():
        for line in (
            f"Loading tokenizer from {MODEL}...",
            "Vocab size: 163840",
            f"Model: {MODEL}",
        ):
            emit(line)

    with open(out, "w", buffering=16 * 1024 * 1024) as f:
        banner()
        budget -= 3
        for i, (name, mode, share) in enumerate(PARTITIONS):
            last = i == len(PARTITIONS) - 1
            header = [
                "=" * 60,
                f"Processing: {name} ({mode})",
                "=" * 60,
            ]
            n_lines = budget - 5 if last else int(total * share)
            planned = n_lines * STEP
            header += [
                f"{name}: {planned} prompts",
                f"Running {planned} requests (concurrency=150, max_tokens=10240)...",
            ]
            lines.extend(header)
            budget -= len(header)
            written = 0
            done = 0
            errors = 0
            rate = rng.uniform(4.0, 40.0)
            avg = rng.uniform(200.0, 900.0)
            restart_at = n_lines // 2 if name == "B3_longform" else -1
            while written < n_lines:
                if rng.random() < NOISE:
                    if rng.random() < 0.2 and n_lines - written >= len(TRACEBACK):
                        lines.extend(TRACEBACK)
                        written += len(TRACEBACK)
                    else:
                        emit(rng.choice(WARNINGS).format(n=rng.randrange(1, 10**6)))
                        written += 1
                    continue
                if written == restart_at:
                    done = max(0, done - 40 * STEP)
                done = min(planned, done + STEP)
                if rng.random() < 0.01:
                    errors += 1
                rate = max(0.5, rate + rng.uniform(-0.2, 0.2))
                avg = max(50.0, avg + rng.uniform(-3.0, 3.0))
                eta = (planned - done) / rate
                emit(
                    f"  {done}/{planned} ({errors} err) {rate:.1f} req/s "
                    f"avg_comp={avg:.0f}tok ETA={fmt_eta(eta)}"
                )
                written += 1
                if len(lines) >= 65536:
                    flush(f, lines)
            budget -= written
        flush(f, lines)
        assert budget == 0, budget


if __name__ == "__main__":
    main()
