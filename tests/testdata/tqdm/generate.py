"""Writes progress logs with the real tqdm library, one file per shape, and a manifest of the
true figures fed to it: usage `generate.py DIR`. Run by tests/it/tqdm.rs (Debian's python3-tqdm,
under /usr/bin/python3); `generate.py tests/testdata/tqdm` refreshes the committed samples.

tqdm's clock is replaced by a fake one, so every rate is exactly what the case says: with
smoothing=0 tqdm prints (n - initial) / elapsed.
"""
import json
import os
import sys

import tqdm
import tqdm.std

NOW = [1_000_000.0]
tqdm.std.time = lambda: NOW[0]
OUT = sys.argv[1]
CASES = {}


def bar(f, **kw):
    kw.setdefault("miniters", 1)
    return tqdm.tqdm(file=f, mininterval=0, smoothing=0, **kw)


def case(name, partition, completed, planned, rate, scaled=False, **extra):
    CASES[name] = dict(file=name + ".log", partition=partition, completed=completed,
                       planned=planned, rate=rate, scaled=scaled, **extra)


def feed(b, n, seconds_each, step=1):
    for _ in range(0, n, step):
        NOW[0] += seconds_each * step
        b.update(step)


def log(name):
    return open(os.path.join(OUT, name + ".log"), "w")


with log("plain") as f:
    b = bar(f, total=1000, desc="B1_glaive")
    feed(b, 600, 1 / 50)
case("plain", "B1_glaive", 600, 1000, 50.0)

# unit_scale: `4.50k/12.0k`, the rate in kit/s.
with log("unit_scale_k") as f:
    b = bar(f, total=12000, desc="B3_big", unit_scale=True)
    feed(b, 4500, 1 / 1500, step=10)
case("unit_scale_k", "B3_big", 4500, 12000, 1500.0, scaled=True)

with log("unit_scale_M") as f:
    b = bar(f, total=123_000_000, desc="M1_huge", unit_scale=True)
    feed(b, 45_600_000, 1 / 2_000_000, step=1_200_000)
case("unit_scale_M", "M1_huge", 45_600_000, 123_000_000, 2_000_000.0, scaled=True)

# unit_divisor=1024 with bytes: counts are read as printed, in decimal prefixes.
with log("bytes_1024") as f:
    b = bar(f, total=10 * 1024 * 1024, desc="shard", unit="B", unit_scale=True,
            unit_divisor=1024)
    feed(b, 3 * 1024 * 1024, 1 / 1_000_000, step=64 * 1024)
case("bytes_1024", "shard", 3 * 1024 * 1024, 10 * 1024 * 1024, 1_000_000.0, scaled=True,
     divisor=1024)

# A custom unit with a leading space: `10.00 examples/s`.
with log("unit_spaced") as f:
    b = bar(f, total=2000, desc="P1_pile", unit=" examples")
    feed(b, 700, 1 / 12.5)
case("unit_spaced", "P1_pile", 700, 2000, 12.5)

# Slower than 1 it/s: `2.50s/it`.
with log("slow") as f:
    b = bar(f, total=100, desc="R1_reddit")
    feed(b, 7, 2.5)
case("slow", "R1_reddit", 7, 100, 0.4)

# Over an hour: elapsed and remaining as H:MM:SS.
with log("over_an_hour") as f:
    b = bar(f, total=10000, desc="long")
    feed(b, 4000, 1.0, step=50)
case("over_an_hour", "long", 4000, 10000, 1.0, logged_eta=6000.0)

# No total: `4500it [01:23, 54.20it/s]`.
with log("no_total") as f:
    b = bar(f, desc="stream")
    feed(b, 4500, 1 / 54.2, step=50)
case("no_total", "stream", 4500, None, 54.2)

# n > total: tqdm drops the total and prints the count alone.
with log("past_total") as f:
    b = bar(f, total=100, desc="over")
    feed(b, 150, 1 / 20)
case("past_total", "over", 150, 100, 20.0)

# set_postfix: other fields are ignored, an output tok/s field is read.
with log("set_postfix") as f:
    b = bar(f, total=500, desc="post")
    for i in range(120):
        NOW[0] += 0.1
        b.set_postfix({"loss": 0.5 - i / 1000, "out_tok/s": 812.5}, refresh=False)
        b.update(1)
case("set_postfix", "post", 120, 500, 10.0, tokens_per_second=812.0, tokens_precision=0.01)

# vLLM's offline LLM.generate: an `Adding requests` bar, then `Processed prompts` with the
# estimated speeds in the postfix, updated as vLLM does after each finished request. Its
# description names no partition: with no header before it, the frames are the default one.
with log("vllm_offline") as f:
    prompts = 10000
    for _ in bar(f, iterable=range(prompts), desc="Adding requests", miniters=500):
        NOW[0] += 1e-4
    b = bar(f, total=prompts, desc="Processed prompts", dynamic_ncols=True,
            postfix=f"est. speed input: {0:.2f} toks/s, output: {0:.2f} toks/s")
    start = NOW[0]
    for n in range(25, 4501, 25):
        NOW[0] += 25 / 54.2
        elapsed = NOW[0] - start
        b.postfix = (f"est. speed input: {n * 512 / elapsed:.2f} toks/s, "
                     f"output: {n * 217 / elapsed:.2f} toks/s")
        b.update(25)
case("vllm_offline", "default", 4500, 10000, 54.2,
     tokens_per_second=217 * 54.2, tokens_precision=0.001)

# Two nested bars with position=: tqdm moves the cursor with ANSI escapes.
with log("nested") as f:
    outer = bar(f, total=3, desc="outer", position=0)
    for i in range(2):
        inner = bar(f, total=4, desc="inner", position=1, leave=False)
        feed(inner, 4, 0.5)
        inner.close()
        outer.update(1)
    inner = bar(f, total=4, desc="inner", position=1, leave=False)
    feed(inner, 2, 0.5)
case("nested", "outer", 2, 3, 0.5, also={"inner": [2, 4]})

with log("ascii") as f:
    b = bar(f, total=50, desc="asc", ascii=True)
    feed(b, 27, 0.1)
case("ascii", "asc", 27, 50, 10.0)

with log("colour") as f:
    b = bar(f, total=50, desc="col", colour="green")
    feed(b, 13, 0.1)
case("colour", "col", 13, 50, 10.0)

# A banner and warnings before the first bar: auto keeps looking.
with log("banner_first") as f:
    for i in range(50):
        f.write(f"WARNING 12-01 10:00:{i:02d} [config.py:{100 + i}] option {i} is deprecated, see [docs, faq]\n")
    b = bar(f, total=300, desc="late")
    feed(b, 120, 0.25)
case("banner_first", "late", 120, 300, 4.0)

with open(os.path.join(OUT, "manifest.json"), "w") as f:
    json.dump(CASES, f, indent=1, sort_keys=True)
