"""Makes the tiny random model the vLLM tests serve, in the folder given: a two-layer
LlamaForCausalLM (head size 64: vLLM's CPU attention kernels refuse 16) and a byte-level BPE
tokenizer trained here on a few sentences. Nothing is downloaded from a model hub."""
import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)

corpus = [
    "Write a short story about a lighthouse keeper.",
    "Fix this: Traceback (most recent call last): CUDA out of memory",
    "Explain how a hash map works, with an example in Python.",
    "The quick brown fox jumps over the lazy dog. 0123456789",
] * 50
tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(
    corpus,
    trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    ),
)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
fast.chat_template = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
)
fast.save_pretrained(out)

torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=len(fast),
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=512,
    bos_token_id=fast.bos_token_id,
    eos_token_id=fast.eos_token_id,
    torch_dtype="float32",
)
LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
print(json.dumps({"model": str(out), "vocab": len(fast)}))
