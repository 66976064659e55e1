"""A synthetic-data run written with datatrove's InferenceRunner, as a user writes one: for each
subset, a LocalPipelineExecutor reads the subset's prompts (JSONL, two shards) and sends each to an
OpenAI-compatible server that is already up (server_type="endpoint"), writing the answers with
the runner's usual JsonlWriter (gzip) to RUN_DIR/output/<subset>/ and the executor's logs,
stats and completion markers to RUN_DIR/logs/<subset>/.

    datatrove_gen.py --base-url http://127.0.0.1:8000/v1 --model NAME --out RUN_DIR \
        --subsets alpha,beta --prompts 40 --max-tokens 8

Uses the peer of scripts/install-library-peers.sh; nothing is fetched from a hub.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from datatrove.executor import LocalPipelineExecutor  # noqa: E402
from datatrove.pipeline.inference.run_inference import InferenceConfig, InferenceRunner  # noqa: E402
from datatrove.pipeline.readers import JsonlReader  # noqa: E402
from datatrove.pipeline.writers import JsonlWriter  # noqa: E402

TASKS = 2  # input shards, and so output files, per subset


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="the server's OpenAI base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True, help="the run's folder")
    p.add_argument("--subsets", default="alpha,beta")
    p.add_argument("--prompts", type=int, default=40, help="prompts per subset")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--metric-interval", type=int, default=10, help="seconds between the runner's metrics reports")
    return p.parse_args()


def write_prompts(folder, subset, n):
    os.makedirs(folder, exist_ok=True)
    for shard in range(TASKS):
        with open(os.path.join(folder, f"prompts_{shard:02d}.jsonl"), "w") as f:
            for i in range(shard, n, TASKS):
                text = f"[{subset} #{i}] Write one sentence about the number {i}."
                f.write(json.dumps({"id": f"{subset}-{i:05d}", "text": text}) + "\n")


def main():
    args = parse_args()
    out = os.path.abspath(args.out)
    # The runner posts to {endpoint_url}/v1/chat/completions.
    endpoint = args.base_url.rstrip("/").removesuffix("/v1")
    max_tokens = args.max_tokens

    async def rollout(document, generate):
        return await generate(
            {"messages": [{"role": "user", "content": document.text}], "max_tokens": max_tokens, "temperature": 0.7}
        )

    for subset in args.subsets.split(","):
        inputs = os.path.join(out, "input", subset)
        write_prompts(inputs, subset, args.prompts)
        print(f"{subset}: {args.prompts} prompts", flush=True)
        executor = LocalPipelineExecutor(
            pipeline=[
                JsonlReader(inputs, glob_pattern="*.jsonl"),
                InferenceRunner(
                    rollout_fn=rollout,
                    config=InferenceConfig(
                        server_type="endpoint",
                        endpoint_url=endpoint,
                        model_name_or_path=args.model,
                        model_max_context=256,
                        max_concurrent_generations=args.concurrency,
                        metric_interval=args.metric_interval,
                    ),
                    output_writer=JsonlWriter(os.path.join(out, "output", subset)),
                ),
            ],
            tasks=TASKS,
            workers=1,
            logging_dir=os.path.join(out, "logs", subset),
        )
        executor.run()
    print("done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
