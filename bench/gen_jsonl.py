#!/usr/bin/env python3
"""Writes synthetic SGLang `/generate`-style output files (JSONL) for bench/outputs.sh.

usage: gen_jsonl.py DIR [MIB] [PARTITIONS]

Writes DIR/<partition>/raw_responses.jsonl for PARTITIONS partition folders (default 4:
B1_glaive, B2_opencodeinstruct, B3_longform, B4_mathinstruct), MIB MiB in all (default 2048),
each file exactly MIB / PARTITIONS MiB. One record per line, shaped like what a batch
pipeline writes after calling SGLang's /generate:

    {"id":"B1-17","prompt_id":"B1_glaive-00000017","text":"...","meta_info":{"id":"<hex>",
     "finish_reason":{"type":"stop","matched":151645},"prompt_tokens":812,
     "completion_tokens":217,"cached_tokens":512,"e2e_latency":9.84}}

The response texts are a few hundred to a few thousand characters (prose, markdown lists,
code with quotes and backslashes, some non-ASCII), so they carry JSON escapes (\\n, \\",
\\\\) and raw UTF-8; about half the records are written with Python's default
ensure_ascii=True (\\uXXXX escapes), half with ensure_ascii=False (raw UTF-8).

Mix, in expectation: ~3% finish_reason "length" (longer texts, completion_tokens =
max_new_tokens), ~1% empty text (finish "stop", 1 token), ~0.5% records with an "error"
field and no meta_info, ~0.1% lines that are not JSON (a record cut short, as a crash
mid-write leaves it). No line is blank: every line is a record a line counter must see.

Speed: a pool of 2000 distinct record bodies is built once and repeated with new ids, so
2 GiB takes well under a minute. The last record of each file is padded so the file is
exactly its share of MIB (the benchmark checks sizes to decide whether to regenerate).

Also writes DIR/manifest.tsv: per partition, what the files contain (records, invalid,
empty, errors, finish reasons, completion tokens), so the benchmark can check what a
reader reports. Deterministic (fixed seed).
"""

import json
import os
import random
import sys

PARTITIONS = ["B1_glaive", "B2_opencodeinstruct", "B3_longform", "B4_mathinstruct"]
POOL = 2000
# Per pool of 2000: exact counts, so the expected shares hold when records are drawn uniformly.
N_LENGTH = 60  # 3%
N_EMPTY = 20  # 1%
N_ERROR = 10  # 0.5%
P_BROKEN = 0.001  # per line: not JSON
MAX_NEW_TOKENS = 2048
STOP_TOKEN = 151645
CHUNK = 16 * 1024 * 1024  # bytes per write

WORDS = (
    "the a of to and in is that for it as with on this be are by an at from or we can which "
    "model data function value result request batch token output input step first then each "
    "return number list string error file time memory loop index array sum case answer "
    "because therefore however example note following approach solution problem compute "
    "check given total partition response process server client query table field record "
    "simple efficient recursive iterative complexity linear quadratic constant equation "
    "derivative integral matrix vector probability distribution expected variance"
).split()
# Non-ASCII that real responses carry: accents, typographic punctuation, math, CJK, emoji.
UNICODE_WORDS = [
    "café", "naïve", "résumé", "—", "“quoted”", "→", "≤", "≥", "×", "π", "∑", "µs", "°C",
    "中文", "数据", "日本語", "한국어", "Привет", "Ω", "…", "🙂", "✅", "🚀",
]
CODE = [
    'def solve(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n',
    'print("Hello, world!")\nname = input("Your name: ")\nprint(f"Hi {name}\\n")\n',
    'for (int i = 0; i < n; i++) {\n    printf("%d\\n", a[i]);\n}\n',
    'const re = /\\d+\\.\\d+/g;\nconsole.log("matches:", s.match(re));\n',
    'SELECT id, "name" FROM users WHERE path LIKE \'C:\\\\data\\\\%\';\n',
    '{\n  "key": "value",\n  "nested": {"n": 1, "s": "a \\"b\\" c"}\n}\n',
]
ERRORS = [
    "httpx.ReadTimeout: timed out",
    "Request timed out after 600s",
    "HTTP 503: Service Unavailable",
    "context length exceeded: 135211 > 131072 tokens",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
]


def sentence(rng):
    n = rng.randint(6, 22)
    words = []
    for _ in range(n):
        if rng.random() < 0.04:
            words.append(rng.choice(UNICODE_WORDS))
        else:
            words.append(rng.choice(WORDS))
    s = " ".join(words)
    if rng.random() < 0.1:
        s += ' "' + rng.choice(WORDS) + '"'
    return s[0].upper() + s[1:] + rng.choice([".", ".", ".", "?", ":", "!"])


def text_of(rng, target):
    """A response of about `target` characters: paragraphs, lists, code blocks."""
    parts = []
    size = 0
    while size < target:
        r = rng.random()
        if r < 0.12:
            block = "```python\n" + rng.choice(CODE) + "```"
        elif r < 0.25:
            block = "\n".join(f"{i + 1}. {sentence(rng)}" for i in range(rng.randint(2, 5)))
        elif r < 0.30:
            block = "## " + sentence(rng).rstrip(".?:!")
        else:
            block = " ".join(sentence(rng) for _ in range(rng.randint(2, 6)))
        parts.append(block)
        size += len(block) + 2
    return "\n\n".join(parts)[: max(target, 1)].rstrip() or "Ok."


def body(rng, kind, ascii_only):
    """A record without its leading `{"id":...,"prompt_id":...,` (added per line)."""
    prompt_tokens = rng.randint(40, 3000)
    meta = {
        "id": "%032x" % rng.getrandbits(128),
        "finish_reason": {"type": "stop", "matched": STOP_TOKEN},
        "prompt_tokens": prompt_tokens,
        "weight_version": "default",
        "completion_tokens": 0,
        "cached_tokens": rng.choice([0, 0, prompt_tokens // 2, prompt_tokens - prompt_tokens % 64]),
        "e2e_latency": 0.0,
    }
    if kind == "error":
        rec = {"text": "", "error": rng.choice(ERRORS)}
        reason, tokens = None, 0
    elif kind == "empty":
        meta["completion_tokens"] = 1
        rec = {"text": "", "meta_info": meta}
        reason, tokens = "stop", 1
    elif kind == "length":
        text = text_of(rng, rng.randint(6500, 9000))
        meta["finish_reason"] = {"type": "length", "length": MAX_NEW_TOKENS}
        meta["completion_tokens"] = MAX_NEW_TOKENS
        rec = {"text": text, "meta_info": meta}
        reason, tokens = "length", MAX_NEW_TOKENS
    else:
        # Log-normal lengths: median ~1100 characters, a few hundred to a few thousand.
        target = int(min(7000, max(200, rng.lognormvariate(7.0, 0.6))))
        text = text_of(rng, target)
        tokens = max(1, round(len(text) / rng.uniform(3.3, 4.3)))
        meta["completion_tokens"] = tokens
        rec = {"text": text, "meta_info": meta}
        reason = "stop"
    if "meta_info" in rec:
        meta["e2e_latency"] = round(rng.uniform(0.5, 3.0) + tokens / rng.uniform(40, 90), 3)
    encoded = json.dumps(rec, ensure_ascii=ascii_only, separators=(",", ":"))
    assert encoded[0] == "{" and "\n" not in encoded
    return encoded[1:], kind, reason, tokens  # without the opening brace


def build_pool(rng):
    kinds = ["length"] * N_LENGTH + ["empty"] * N_EMPTY + ["error"] * N_ERROR
    kinds += ["stop"] * (POOL - len(kinds))
    rng.shuffle(kinds)
    return [body(rng, k, rng.random() < 0.5) for k in kinds]


def write_partition(path, index, name, size, pool, rng):
    prefix = f"B{index + 1}"
    counts = {"records": 0, "invalid": 0, "empty": 0, "errors": 0, "tokens": 0,
              "stop": 0, "length": 0, "bytes": 0}
    remaining = size
    n = 0
    buf = []
    buffered = 0

    def count(kind, reason, tokens):
        counts["records"] += 1
        if kind == "empty":
            counts["empty"] += 1
        elif kind == "error":
            counts["errors"] += 1
        if reason:
            counts[reason] += 1
        counts["tokens"] += tokens

    with open(path, "wb", buffering=0) as f:
        # Records are at most ~12 KB; stop 32 KiB before the end and pad one last record.
        while remaining >= 32 * 1024:
            n += 1
            rest, kind, reason, tokens = pool[rng.randrange(POOL)]
            line = f'{{"id":"{prefix}-{n}","prompt_id":"{name}-{n:08d}",{rest}\n'.encode()
            if rng.random() < P_BROKEN:
                # A record cut short by a crash: not JSON, but still one line.
                line = line[: rng.randint(20, len(line) - 2)] + b"\n"
                counts["records"] += 1
                counts["invalid"] += 1
            else:
                count(kind, reason, tokens)
            buf.append(line)
            buffered += len(line)
            remaining -= len(line)
            if buffered >= CHUNK:
                f.write(b"".join(buf))
                buf.clear()
                buffered = 0
        # The last record: a long "stop" response padded to end the file at exactly `size`.
        n += 1
        head = f'{{"id":"{prefix}-{n}","prompt_id":"{name}-{n:08d}","text":"'.encode()
        tokens = remaining // 4
        tail = (
            '","meta_info":{"finish_reason":{"type":"stop","matched":%d},'
            '"completion_tokens":%d}}\n' % (STOP_TOKEN, tokens)
        ).encode()
        pad = remaining - len(head) - len(tail)
        filler = (" ".join(rng.choice(WORDS) for _ in range(pad // 3 + 10)))[:pad].encode()
        buf.append(head + filler + tail)
        count("stop", "stop", tokens)
        f.write(b"".join(buf))
    assert os.path.getsize(path) == size, (path, os.path.getsize(path), size)
    counts["bytes"] = size
    return counts


def main():
    out = sys.argv[1]
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    nparts = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    names = (PARTITIONS + [f"B{i + 1}_extra" for i in range(len(PARTITIONS), nparts)])[:nparts]
    total = mib * 1024 * 1024
    if total % nparts:
        sys.exit(f"gen_jsonl.py: {mib} MiB does not split evenly over {nparts} files")
    rng = random.Random(20240611)
    pool = build_pool(rng)
    rows = []
    for i, name in enumerate(names):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "raw_responses.jsonl")
        print(f"  {path}", file=sys.stderr)
        rows.append((name, write_partition(path + ".tmp", i, name, total // nparts, pool, rng)))
        os.replace(path + ".tmp", path)
    cols = ["records", "invalid", "empty", "errors", "stop", "length", "tokens", "bytes"]
    with open(os.path.join(out, "manifest.tsv"), "w") as m:
        m.write("partition\t" + "\t".join(cols) + "\n")
        for name, c in rows:
            m.write(name + "\t" + "\t".join(str(c[k]) for k in cols) + "\n")


if __name__ == "__main__":
    main()
