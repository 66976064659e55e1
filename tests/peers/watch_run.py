"""Watches a run's folder while its driver runs and writes what it sees every INTERVAL seconds:
each file that is new or changed in size since the last look, with its size (as
`find RUN -type f -printf '%s %P\\n'` prints them; every file the first time), the files that
went away, for each output file listed the records it holds complete at that moment, and the
driver's TCP connections to the server (`ss -tanp`), so that the samples show how files grow and
how the client connects.

    watch_run.py --pid PID --run RUN_DIR --port PORT [--interval 2] > growth.txt

Records: .jsonl.gz the complete lines of what decompresses (as `zcat | wc -l`, a gzip stream cut
short still gives its whole lines); .jsonl the lines that end with a newline; .parquet the rows
its footer declares (none until the footer is written); .arrow the rows of every complete record
batch, read as an Arrow IPC stream or file, whichever its magic bytes say.
Runs under the library's virtualenv (pyarrow).
"""

import argparse
import os
import re
import subprocess
import sys
import time
import zlib

NL = b"\n"


def gz_lines(path):
    data = open(path, "rb").read()
    out = b""
    try:
        # Concatenated members, as zcat reads them; stop at the first incomplete one.
        while data:
            d = zlib.decompressobj(zlib.MAX_WBITS | 16)
            out += d.decompress(data)
            if not d.eof:
                break
            data = d.unused_data
    except zlib.error as e:
        return f"{out.count(NL)} lines (gzip error: {e})"
    return f"{out.count(NL)} lines"


def jsonl_lines(path):
    return f"{open(path, 'rb').read().count(NL)} lines"


def parquet_rows(path):
    import pyarrow.parquet as pq

    try:
        return f"{pq.ParquetFile(path).metadata.num_rows} rows (footer)"
    except Exception as e:
        return f"no footer yet ({type(e).__name__})"


def arrow_rows(path):
    import pyarrow as pa

    with open(path, "rb") as f:
        head = f.read(8)
    kind = "file" if head[:6] == b"ARROW1" else "stream"
    try:
        if kind == "file":
            r = pa.ipc.open_file(path)
            rows = sum(r.get_batch(i).num_rows for i in range(r.num_record_batches))
            return f"{rows} rows (IPC file, {r.num_record_batches} batches)"
        rows = batches = 0
        with pa.memory_map(path) as src:
            r = pa.ipc.open_stream(src)
            try:
                for b in r:
                    rows += b.num_rows
                    batches += 1
            except Exception as e:
                return f"{rows} rows (IPC stream, {batches} batches, then {type(e).__name__})"
        return f"{rows} rows (IPC stream, {batches} batches, end marker read)"
    except Exception as e:
        return f"unreadable yet ({type(e).__name__}: {e})"


def count(path):
    name = os.path.basename(path)
    try:
        if name.endswith(".jsonl.gz"):
            return gz_lines(path)
        if name.endswith(".jsonl"):
            return jsonl_lines(path)
        if name.endswith(".parquet"):
            return parquet_rows(path)
        if name.endswith(".arrow"):
            return arrow_rows(path)
    except FileNotFoundError:
        return "gone"
    return None


def connections(port):
    """The client side of every TCP connection to the server's port: (state, local, remote, users)."""
    try:
        out = subprocess.run(["ss", "-tanp"], capture_output=True, text=True, timeout=5).stdout
    except Exception as e:
        print(f"ss failed: {e}")
        return []
    conns = []
    for line in out.splitlines()[1:]:
        f = line.split()
        if len(f) >= 5 and f[4].endswith(f":{port}"):
            conns.append((f[0], f[3], f[4], f[5] if len(f) > 5 else ""))
        elif len(f) >= 5 and f[0] == "TIME-WAIT" and f[3].endswith(f":{port}"):
            # The server closed it first (the client asked for Connection: close): the TIME-WAIT
            # is on the server's side.
            conns.append(("server-side-TIME-WAIT", f[3], f[4], ""))
    return conns


def snapshot(run, t, port, before, seen, last_ports):
    """Prints the files that are new or changed in size since the last snapshot (all of them the
    first time), those that went away, and how many stayed as they were."""
    print(f"=== t={t:.1f}s")
    files = {}
    for root, _, names in os.walk(run):
        for n in names:
            p = os.path.join(root, n)
            try:
                files[os.path.relpath(p, run)] = os.lstat(p).st_size
            except FileNotFoundError:
                pass
    same = 0
    for r, size in sorted(files.items()):
        if seen.get(r) == size:
            same += 1
            continue
        c = count(os.path.join(run, r))
        print(f"{size} {r}" + (f"  [{c}]" if c else ""))
    for r in sorted(set(seen) - set(files)):
        print(f"gone {r}")
    if same:
        print(f"({same} files unchanged)")
    seen.clear()
    seen.update(files)
    # Connections that were there when the watch began (an earlier run's TIME-WAIT) are left out;
    # an open one is listed with its local port and process, the closed ones (TIME-WAIT on the
    # client's or, when the server closed first, on the server's side) are counted.
    conns = [c for c in connections(port) if c[:3] not in before]
    states = {}
    for c in conns:
        states[c[0]] = states.get(c[0], 0) + 1
    print("connections to :%s: %s" % (port, ", ".join(f"{k} {v}" for k, v in sorted(states.items())) or "none"))
    # The open ones by state and process, with how many of their local ports were already open
    # at the last look: a kept-alive pool keeps its ports, a client that connects per request
    # shows new ones every time.
    groups = {}
    for state, local, remote, users in conns:
        if "TIME-WAIT" not in state:
            owner = re.sub(r",fd=\d+", "", users) or "(no owner shown)"
            groups.setdefault((state, owner), []).append(local.rsplit(":", 1)[1])
    now = set()
    for (state, owner), ports in sorted(groups.items()):
        kept = sum(1 for p in ports if p in last_ports)
        print(f"  {state} {owner}: {len(ports)}, {kept} of them open at the last look; local ports {' '.join(sorted(ports))}")
        now.update(ports)
    last_ports.clear()
    last_ports.update(now)
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--port", required=True)
    ap.add_argument("--interval", type=float, default=2.0)
    a = ap.parse_args()
    print(f"run folder {a.run} (paths below are relative to it), driver pid {a.pid}")
    before = {c[:3] for c in connections(a.port)}
    seen = {}
    last_ports = set()
    start = time.monotonic()
    while True:
        alive = os.path.exists(f"/proc/{a.pid}") and open(f"/proc/{a.pid}/stat").read().split()[2] != "Z"
        snapshot(a.run, time.monotonic() - start, a.port, before, seen, last_ports)
        if not alive:
            print("=== the driver has exited")
            break
        time.sleep(a.interval)


if __name__ == "__main__":
    main()
