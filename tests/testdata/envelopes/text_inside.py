"""A reference unwrapper: prints the text lines inside an envelope file, one a line, as the
.md files' "## Text inside" lists them. Usage: text_inside.py cri|docker|json FILE.
For json, a line that is not JSON is text as it is.

A line is handed on when its end arrives: a '\n' or '\r' inside a record, or the end of a
whole record; a cut record's (CRI P, json-file log without '\n') last piece waits for the
next record of the same stream, so the stdout and stderr lines stay apart. Empty pieces
(before tqdm's first '\r') are not lines.
"""
import json
import re
import sys

kind, path = sys.argv[1], sys.argv[2]
held = {}
out = []


def text(stream, content, cut):
    pieces = re.split(r"\r|\n", held.pop(stream, "") + content)
    if cut:
        held[stream] = pieces.pop()
    out.extend(p for p in pieces if p)


for raw in open(path, "rb"):
    raw = raw.rstrip(b"\n")
    if kind == "cri":
        stamp, stream, tag, content = raw.split(b" ", 3)
        text(stream, content.decode("utf-8", "surrogateescape"), tag == b"P")
    elif kind == "docker":
        rec = json.loads(raw)
        log = rec["log"]
        cut = not log.endswith("\n")
        text(rec["stream"], log if cut else log[:-1], cut)
    else:
        try:
            rec = json.loads(raw)
        except ValueError:  # not a JSON log object: text (an uncaught traceback Python printed)
            text(None, raw.decode("utf-8", "surrogateescape"), False)
            continue
        parts = [rec.get(k) for k in ("message", "event", "msg", "exc_info", "exception", "stack_info")]
        text(None, "\n".join(p for p in parts if isinstance(p, str)), False)
for line in out:
    print(line.encode("utf-8", "surrogateescape").decode("utf-8"))
