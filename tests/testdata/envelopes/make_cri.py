r"""Wraps a captured stream (capture.py's .raw) as containerd's CRI logger writes it into
/var/log/pods/.../N.log: usage `make_cri.py IN.raw [--max-len N] > OUT.log`.

Ported from containerd internal/cri/io/logger.go (redirectLogs, readLine), one reader per
stream, the two streams' records then interleaved by the time they were written:
- a bufio.Reader of min(4096, maxLen) bytes; readLine = ReadSlice('\n'), which hands back
  a full buffer as a prefix (a '\r' ending it is unread, so "\r\n" never straddles);
- a line ends at '\n' only: a '\r' inside a line (tqdm's frames) stays in the content, a
  "\r\n" ending is dropped whole;
- once a line's pieces add up to more than maxLen (default max_container_log_line_size
  16384), its first maxLen bytes are written tagged P; the rest of the line ends tagged F
  (a stream that ends without '\n' ends tagged P);
- `TIME STREAM TAG CONTENT\n`, TIME = time.Now() at the write in RFC3339Nano (Go trims a
  fraction's trailing zeros); here the arrival time of the read that completed the record,
  in UTC (a node's containerd runs in UTC; it formats its local time).
"""
import argparse
import json
import time


class Reader:
    """Go's bufio.Reader over one stream's timed reads; `now` is the latest read's time."""

    def __init__(self, chunks, size):
        self.chunks, self.size, self.buf, self.now = list(chunks), size, b"", 0

    def read_slice(self):
        """ReadSlice('\n'): (line, error) with error None, 'full' or 'eof'."""
        scanned = 0
        while True:
            i = self.buf.find(b"\n", scanned)
            if i >= 0:
                line, self.buf = self.buf[: i + 1], self.buf[i + 1 :]
                return line, None
            if len(self.buf) >= self.size:
                line, self.buf = self.buf, b""
                return line, "full"
            if not self.chunks:
                line, self.buf = self.buf, b""
                return line, "eof"
            scanned = len(self.buf)
            # fill(): one Read into the free space; an io.Pipe read takes at most what one
            # write (one read of the container's FIFO) brought.
            t, data = self.chunks[0]
            room = self.size - len(self.buf)
            self.buf += data[:room]
            self.now = max(self.now, t)
            if len(data) > room:
                self.chunks[0] = (t, data[room:])
            else:
                self.chunks.pop(0)

    def read_line(self):
        """containerd's readLine: (line, is_prefix, eof)."""
        line, err = self.read_slice()
        if err == "full":
            if line.endswith(b"\r"):  # UnreadByte: "\r\n" must not straddle the buffer
                line, self.buf = line[:-1], b"\r" + self.buf
            return line, True, False
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        return line, False, err == "eof"


def redirect(stream, chunks, max_len):
    """redirectLogs for one stream: yields (time_ns, stream, tag, content)."""
    r = Reader(chunks, min(4096, max_len) if max_len > 0 else 4096)
    buf = []
    while True:
        line, is_prefix, eof = r.read_line()
        if line:
            buf.append(line)
        length = sum(map(len, buf))
        if eof and length == 0:
            return
        if max_len > 0 and length > max_len:
            exceed = length - max_len
            last = buf[-1]
            buf[-1] = last[: len(last) - exceed]
            yield r.now, stream, "P", b"".join(buf)
            buf = [last[len(last) - exceed :]]
        if is_prefix:
            continue
        yield r.now, stream, "P" if eof else "F", b"".join(buf)
        buf = []
        if eof:
            return


def rfc3339nano(t_ns):
    secs, ns = divmod(t_ns, 10**9)
    frac = f".{ns:09d}".rstrip("0").rstrip(".")
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + frac + "Z"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("--max-len", type=int, default=16384)
    args = ap.parse_args()
    streams = {"stdout": [], "stderr": []}
    for rec in map(json.loads, open(args.raw)):
        data = rec["data"].encode("utf-8", "surrogateescape")
        streams[rec["stream"]].append((rec["t_ns"], data))
    records = [rec for name, chunks in streams.items()
               for rec in redirect(name, chunks, args.max_len)]
    records.sort(key=lambda rec: rec[0])  # stable: one stream's records keep their order
    out = open(1, "wb", closefd=False)
    for t_ns, stream, tag, content in records:
        out.write(f"{rfc3339nano(t_ns)} {stream} {tag} ".encode() + content + b"\n")


main()
