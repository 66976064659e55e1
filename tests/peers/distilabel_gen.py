"""A synthetic-data run written with distilabel, as a user writes one: a Pipeline with, per
subset, a LoadDataFromDicts step feeding a TextGeneration step (answer_<subset>) whose OpenAILLM
talks to an OpenAI-compatible server that is already up (base_url). The pipeline's cache (its
batches, the steps' parquet outputs, pipeline.yaml and pipeline.log) is in
RUN_DIR/distilabel_cache (the Pipeline's cache_dir); the Distiset is saved to RUN_DIR/distiset.

    distilabel_gen.py --base-url http://127.0.0.1:8000/v1 --model NAME --out RUN_DIR \
        --subsets alpha,beta --prompts 40 --max-tokens 8

Uses the peer of scripts/install-library-peers.sh; nothing is fetched from a hub.
"""

import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("OPENAI_API_KEY", "EMPTY")

from distilabel.models import OpenAILLM  # noqa: E402
from distilabel.pipeline import Pipeline  # noqa: E402
from distilabel.steps import LoadDataFromDicts  # noqa: E402
from distilabel.steps.tasks import TextGeneration  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="the server's OpenAI base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True, help="the run's folder")
    p.add_argument("--subsets", default="alpha,beta")
    p.add_argument("--prompts", type=int, default=40, help="prompts per subset")
    p.add_argument("--max-tokens", type=int, default=8)
    return p.parse_args()


def main():
    args = parse_args()
    out = os.path.abspath(args.out)
    with Pipeline(name="pulse-distilabel", cache_dir=os.path.join(out, "distilabel_cache")) as pipeline:
        for subset in args.subsets.split(","):
            rows = [
                {"id": f"{subset}-{i:05d}", "instruction": f"[{subset} #{i}] Write one sentence about the number {i}."}
                for i in range(args.prompts)
            ]
            load = LoadDataFromDicts(name=f"load_{subset}", data=rows)
            answer = TextGeneration(
                name=f"answer_{subset}",
                llm=OpenAILLM(model=args.model, base_url=args.base_url, api_key=os.environ["OPENAI_API_KEY"]),
            )
            load >> answer
            print(f"generating {subset}: {len(rows)} rows", flush=True)

    generation = {"max_new_tokens": args.max_tokens, "temperature": 0.7}
    distiset = pipeline.run(
        parameters={f"answer_{s}": {"llm": {"generation_kwargs": generation}} for s in args.subsets.split(",")},
    )
    distiset.save_to_disk(os.path.join(out, "distiset"))
    for name, ds in distiset.items():
        print(f"{name}: saved {sum(len(split) for split in ds.values())} rows", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
