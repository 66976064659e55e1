"""A synthetic-data run written with Bespoke Labs' Curator, as a user writes one: a curator.LLM
subclass whose requests go to an OpenAI-compatible server that is already up (backend "openai"
with its base_url), one dataset per subset, Curator's cache in RUN_DIR/curator_cache
(CURATOR_CACHE_DIR), each subset's result saved with datasets' save_to_disk to
RUN_DIR/datasets/<subset>.

    curator_gen.py --base-url http://127.0.0.1:8000/v1 --model NAME --out RUN_DIR \
        --subsets alpha,beta --prompts 40 --max-tokens 8

Uses the peer of scripts/install-library-peers.sh; nothing is fetched from a hub: litellm's own
copy of its model price list and of tiktoken's cl100k_base, no telemetry.
"""

import argparse
import os
import sys

out = None
for i, a in enumerate(sys.argv):
    if a == "--out" and i + 1 < len(sys.argv):
        out = os.path.abspath(sys.argv[i + 1])
    elif a.startswith("--out="):
        out = os.path.abspath(a.split("=", 1)[1])
# Before curator is imported: it reads these when it loads.
if out:
    os.environ.setdefault("CURATOR_CACHE_DIR", os.path.join(out, "curator_cache"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TELEMETRY_ENABLED", "false")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OPENAI_API_KEY", "EMPTY")
# Curator counts tokens with tiktoken's cl100k_base, which tiktoken downloads on first use; litellm
# (a Curator requirement) ships that file, in tiktoken's cache layout.
if "TIKTOKEN_CACHE_DIR" not in os.environ:
    import importlib.util

    litellm = os.path.dirname(importlib.util.find_spec("litellm").origin)
    os.environ["TIKTOKEN_CACHE_DIR"] = os.path.join(litellm, "litellm_core_utils", "tokenizers")

from bespokelabs import curator  # noqa: E402
from datasets import Dataset  # noqa: E402


class Answerer(curator.LLM):
    def prompt(self, row):
        return row["prompt"]

    def parse(self, row, response):
        return {"id": row["id"], "prompt": row["prompt"], "answer": response}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="the server's OpenAI base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True, help="the run's folder")
    p.add_argument("--subsets", default="alpha,beta")
    p.add_argument("--prompts", type=int, default=40, help="prompts per subset")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=8)
    return p.parse_args()


def main():
    args = parse_args()
    out = os.path.abspath(args.out)
    llm = Answerer(
        model_name=args.model,
        backend="openai",
        backend_params={
            "base_url": args.base_url,
            "api_key": os.environ["OPENAI_API_KEY"],
            "max_concurrent_requests": args.concurrency,
            "max_requests_per_minute": 6000,
            "max_tokens_per_minute": 10_000_000,
            "request_timeout": 300,
            # Curator counts a response cut at max_tokens ("length") as failed and retries it;
            # short answers are what this run wants.
            "invalid_finish_reasons": ["content_filter"],
        },
        generation_params={"max_tokens": args.max_tokens, "temperature": 0.7},
    )
    for subset in args.subsets.split(","):
        rows = [
            {"id": f"{subset}-{i:05d}", "prompt": f"[{subset} #{i}] Write one sentence about the number {i}."}
            for i in range(args.prompts)
        ]
        print(f"generating {subset}: {len(rows)} rows", flush=True)
        result = llm(Dataset.from_list(rows))
        dataset = result.dataset if hasattr(result, "dataset") else result
        dataset.save_to_disk(os.path.join(out, "datasets", subset))
        print(f"{subset}: saved {len(dataset)} rows", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
