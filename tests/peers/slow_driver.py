"""A batch driver at a steady pace, as SLURM jobs run one: writes run_inference.py's progress
log for TOTAL requests at RATE a second, and resumes where it left off when started again in
the same folder (a requeued job), as the seed's driver does from the records it already has.

usage: slow_driver.py LOG TOTAL RATE
"""
import sys
import time
from pathlib import Path

log_path, total, rate = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
done_path = log_path.with_suffix(".done")
done = int(done_path.read_text()) if done_path.exists() else 0
log = open(log_path, "a", buffering=1)
log.write(f"Model: tiny\nProcessing: B1 (CODE)\nB1: {total} prompts\n")
log.write(f"Running {total} requests (concurrency=4, max_tokens=64)...\n")
while done < total:
    time.sleep(1 / rate)
    done += 1
    done_path.write_text(str(done))
    log.write(f"  {done}/{total} (0 err) {rate:.1f} req/s avg_comp=64tok ETA={(total - done) / rate:.0f}s\n")
log.write(f"Done: B1 ({done} responses)\nAll partitions complete.\n")
