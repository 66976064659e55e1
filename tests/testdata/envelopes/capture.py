"""Runs a program as a container runtime would (stdout and stderr as two pipes) and records
every read with its stream and arrival time: the input of make_cri.py and make_docker.py.

Usage: capture.py OUT.raw -- python tqdm_driver.py
OUT.raw holds one JSON object a read: {"t_ns": ..., "stream": "stdout"|"stderr", "data": ...};
data is the bytes decoded as UTF-8 with surrogateescape (a character cut between two reads
comes back byte for byte).
"""
import json
import os
import selectors
import subprocess
import sys
import time

out, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
sel = selectors.DefaultSelector()
sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
with open(out, "w") as f:
    while sel.get_map():
        for key, _ in sel.select():
            data = os.read(key.fileobj.fileno(), 65536)
            t_ns = time.time_ns()
            if not data:
                sel.unregister(key.fileobj)
                continue
            text = data.decode("utf-8", "surrogateescape")
            f.write(json.dumps({"t_ns": t_ns, "stream": key.data, "data": text}) + "\n")
sys.exit(proc.wait())
