"""The program inside the container: a batch driver's lines on stdout, a real tqdm bar on
stderr, and one long stdout line (longer than the runtime's line limit in use).

Prints flush at once, as in a container run with PYTHONUNBUFFERED=1; without it Python
buffers a pipe's stdout and the driver's lines would come out at exit.
"""
import sys
import time

from tqdm import tqdm

print("Model: /models/tiny", flush=True)
print("Processing: B1 (SHORT)", flush=True)
print("B1: 40 prompts", flush=True)
bar = tqdm(total=40, desc="B1")  # file defaults to sys.stderr
for i in range(1, 41):
    time.sleep(0.12)  # over tqdm's mininterval (0.1 s), so every update is drawn
    bar.update(1)
    if i == 20:
        print("  20/40 (0 err) 8.1 req/s avg_comp=118tok ETA=2s", flush=True)
bar.close()
ids = ",".join(f"B1-{i:04d}" for i in range(1, 41))
print(f"B1: wrote 40 results to /out/B1.jsonl; ids={ids}; ids_again={ids}", flush=True)
