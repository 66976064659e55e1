"""An offline batch driver as users write one with vLLM's `LLM` class: one engine in the
process, one `llm.generate` call per partition (vLLM draws its own tqdm bars on stderr), the
partition's responses written once the call returns.

usage: vllm_offline.py RUN_DIR MODEL > RUN_DIR/run.log 2>&1

Its own lines go through `logging` (stderr, flushed per line), so they land in order with
vLLM's bars and log lines however the output is redirected; print() would sit in a buffer.
"""
import json
import logging
import sys
from pathlib import Path

from vllm import LLM, SamplingParams

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("driver")
PARTITIONS = {"B1": 24, "B2": 20, "B3": 16}
TOPICS = ["a lighthouse keeper", "a hash map in Python", "CUDA out of memory", "the lazy dog"]


def main():
    run_dir, model = Path(sys.argv[1]), sys.argv[2]

    log.info("Model: %s", model)
    # The engine settings the tests serve the tiny model with on two CPU cores: float32, no graph
    # capture, a short context, and few sequences and KV blocks, so requests queue in the engine.
    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=256,
              max_num_seqs=4, num_gpu_blocks_override=5, seed=0)
    # Greedy: the same text every run. 192 tokens keeps a partition to seconds on two cores, yet
    # long enough for several bar frames, and four such sequences outgrow the 640-token cache.
    params = SamplingParams(temperature=0.0, max_tokens=192)

    for name, count in PARTITIONS.items():
        prompts = [f"Write a short story about {TOPICS[i % len(TOPICS)]}. #{name}-{i}"
                   for i in range(count)]
        log.info("Processing: %s (%d prompts)", name, count)
        outputs = llm.generate(prompts, params)  # use_tqdm=True: vLLM's bars
        out = run_dir / "outputs" / name
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "responses.jsonl", "w") as f:
            for i, o in enumerate(outputs):  # in prompt order: vLLM sorts them by request id
                c = o.outputs[0]
                f.write(json.dumps({
                    "id": f"{name}-{i}", "prompt": o.prompt, "text": c.text,
                    "finish_reason": c.finish_reason,
                    "usage": {"prompt_tokens": len(o.prompt_token_ids),
                              "completion_tokens": len(c.token_ids)},
                }) + "\n")
        log.info("Done: %s (%d responses)", name, len(outputs))
    log.info("All partitions complete.")


# vLLM starts its EngineCore with multiprocessing's spawn, which imports this file again: without
# the guard the child would build an LLM of its own, and the engine fails to start.
if __name__ == "__main__":
    main()
