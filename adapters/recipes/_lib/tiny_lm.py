"""A tiny causal language model built from a config, and small generated data sets, so that a
post-training recipe runs end to end with nothing downloaded (model `tiny-llama`, dataset
`synthetic`). Shipped beside the artifacts by the recipes' `include`.

The shapes, the vocabulary and the data are plain Python (tested without any framework); only
``build_tokenizer`` and ``build_model`` import `tokenizers`, `transformers` and `torch`.

The tokenizer is byte-level (GPT-2's byte-to-character map, no merges): any text encodes, and
decoding gives it back. Its chat template is a minimal one (verl renders prompts with it).
"""

from __future__ import annotations

import random
from typing import Any

TINY = "tiny-llama"
PAD, BOS, EOS = "<pad>", "<s>", "</s>"
SPECIAL = (PAD, BOS, EOS)
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in for each of the 256 bytes, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]  # fmt: skip
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def vocab() -> dict[str, int]:
    return {token: i for i, token in enumerate([*SPECIAL, *byte_alphabet()])}


def llama_config(max_positions: int) -> dict[str, Any]:
    """The keyword arguments of `transformers.LlamaConfig` for the tiny model: 2 layers, hidden
    size 128, 2 heads of 64 (a head size every attention kernel and vLLM accept)."""
    return {
        "vocab_size": 264,  # 3 special + 256 byte tokens, padded to a multiple of 8
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": max(max_positions, 64),
        "tie_word_embeddings": True,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def build_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(vocab=vocab(), merges=[], unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, bos_token=BOS, eos_token=EOS
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(max_positions: int, seed: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**llama_config(max_positions)))


# -- generated data: additions, which even a tiny model learns something of -----------------


def _sums(n: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(0, 49), rng.randint(0, 49)) for _ in range(n)]


def sft_rows(n: int, seed: int) -> list[dict[str, str]]:
    """Language-modelling rows (`text`) for SFT."""
    return [{"text": f"{a}+{b}={a + b}"} for a, b in _sums(n, seed)]


def prompt_rows(n: int, seed: int) -> list[dict[str, str]]:
    """Prompt-only rows for GRPO: `prompt`, and the `answer` the reward functions check."""
    return [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in _sums(n, seed)]


def preference_rows(n: int, seed: int) -> list[dict[str, str]]:
    """Preference rows for DPO: the right sum is chosen, a wrong one rejected."""
    return [{"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(a + b + 1)}
            for a, b in _sums(n, seed)]  # fmt: skip
