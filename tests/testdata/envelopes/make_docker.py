r"""Wraps a captured stream (capture.py's .raw) as Docker's json-file log driver writes it
(/var/lib/docker/containers/ID/ID-json.log): usage `make_docker.py IN.raw [--buf-size N]`.

Ported from moby daemon/logger/copier.go (copySrc), jsonfilelog/jsonfilelog.go
(marshalMessage) and jsonfilelog/jsonlog/jsonlogbytes.go (MarshalJSONBuf), one copier per
stream, the two streams' messages then interleaved by time (the logger takes one at a time):
- reads of at most 2 KiB into a 16 KiB buffer (json-file has no BufSize of its own);
- a message ends at '\n' only ('\r' is content); a buffer filled without '\n' (or the
  stream's end) is sent as a partial message, the rest follows in further messages;
- "log" is the message's bytes plus '\n', without it for a partial that is not the last;
- "time" is time.Now().UTC() of the read that completed the message, RFC3339Nano (trailing
  zeros trimmed); a partial message's pieces all carry the first piece's time;
- the text is escaped byte by byte: '\\' '"' '\n' '\r' as such, other controls and < > &
  as \u00XX, U+2028/2029 as \u202X, and every byte of invalid UTF-8 (a character the
  16 KiB cut split) as \ufffd.
"""
import argparse
import json
import time

READ_SIZE = 2 * 1024


def copy_src(stream, chunks, buf_size):
    """copySrc for one stream: yields (written_ns, time_ns, stream, line, partial_not_last)."""
    chunks, buf, eof, partial_ts, now = list(chunks), b"", False, None, 0
    while True:
        upto = min(len(buf) + READ_SIZE, buf_size)
        if upto > len(buf):
            if chunks:  # one Read of the FIFO: at most what one write brought
                t, data = chunks[0]
                take = upto - len(buf)
                buf, now = buf + data[:take], t
                chunks[0:1] = [(t, data[take:])] if len(data) > take else []
            else:
                eof = True
        if not buf and eof:
            return
        p = 0
        while (q := buf.find(b"\n", p)) >= 0:
            # The last piece of a partial message keeps the first piece's time.
            yield now, (partial_ts or now), stream, buf[p:q], False
            partial_ts = None
            p = q + 1
        if eof or (p == 0 and len(buf) == buf_size):
            if p < len(buf):
                partial_ts = partial_ts or now
                yield now, partial_ts, stream, buf[p:], True
                buf, p = b"", 0
            if eof:
                return
        buf = buf[p:]


def escape(s):
    """ffjsonWriteJSONBytesAsString."""
    out, i = ['"'], 0
    while i < len(s):
        b = s[i]
        if b < 0x80:
            c = chr(b)
            if 0x20 <= b and c not in '\\"<>&':
                out.append(c)
            else:
                out.append({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"}.get(c, f"\\u00{b:02x}"))
            i += 1
            continue
        size = 2 if b >= 0xC0 else 1
        size = 3 if b >= 0xE0 else size
        size = 4 if b >= 0xF0 else size
        try:
            c = s[i : i + size].decode("utf-8") if size > 1 else None
        except UnicodeDecodeError:
            c = None
        if c is None or len(c) != 1:
            out.append("\\ufffd")
            i += 1
            continue
        out.append(f"\\u{ord(c):04x}" if c in "\u2028\u2029" else c)
        i += size
    return "".join(out) + '"'


def rfc3339nano(t_ns):
    secs, ns = divmod(t_ns, 10**9)
    frac = f".{ns:09d}".rstrip("0").rstrip(".")
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + frac + "Z"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("--buf-size", type=int, default=16 * 1024)
    args = ap.parse_args()
    streams = {"stdout": [], "stderr": []}
    for rec in map(json.loads, open(args.raw)):
        data = rec["data"].encode("utf-8", "surrogateescape")
        streams[rec["stream"]].append((rec["t_ns"], data))
    msgs = [m for name, chunks in streams.items() for m in copy_src(name, chunks, args.buf_size)]
    # In the order written (stable: one stream's messages keep theirs); a partial message's
    # later pieces are written after their time, so the file's times can go backwards.
    msgs.sort(key=lambda m: m[0])
    out = open(1, "wb", closefd=False)
    for _, t_ns, stream, line, partial in msgs:
        log = line if partial else line + b"\n"
        rec = '{"log":' + escape(log) + ',"stream":"' + stream + '","time":"' + rfc3339nano(t_ns) + '"}\n'
        out.write(rec.encode("utf-8"))


main()
