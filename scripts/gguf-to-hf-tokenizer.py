#!/usr/bin/env python3
"""Write a Hugging Face tokenizer + config.json folder for a GGUF model with a GPT-2-style
(byte-level BPE) vocabulary, from the GGUF's own metadata: no weights, no download.

Made for Dynamo's mocker engine (scripts/real-server dynamo), which reads only the tokenizer
and config.json (the mocker simulates the model): with the real SmolLM2 vocabulary, the mocker
counts prompts as llama-server does with the same GGUF. config.json carries "architectures"
(without it Dynamo 1.6.1 silently never serves the model) and the GGUF's sizes and context.

usage: gguf-to-hf-tokenizer.py MODEL.gguf OUT_DIR
Needs the `gguf` and `tokenizers` packages.
"""
import json
import os
import sys

import gguf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(src)
    if field(r, "tokenizer.ggml.model") != "gpt2":
        sys.exit(f"{src}: tokenizer.ggml.model is not gpt2 (byte-level BPE); not supported")
    tokens = field(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    types = field(r, "tokenizer.ggml.token_type")
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    # llama.cpp's "smollm" pre-tokenizer: every digit on its own, then GPT-2's split.
    pre = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if field(r, "tokenizer.ggml.pre") == "smollm":
        pre.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(pre)
    tok.decoder = decoders.ByteLevel()
    # Control tokens (type 3) are special: never split, skipped when decoding.
    specials = [t for t, ty in zip(tokens, types) if ty == 3]
    tok.add_special_tokens(specials)

    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    name = lambda key: tokens[field(r, key)] if field(r, key) is not None else None  # noqa: E731
    arch = field(r, "general.architecture")
    ctx = int(field(r, f"{arch}.context_length"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": name("tokenizer.ggml.bos_token_id"),
        "eos_token": name("tokenizer.ggml.eos_token_id"),
        "unk_token": name("tokenizer.ggml.unknown_token_id"),
        "pad_token": name("tokenizer.ggml.padding_token_id"),
        "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token")),
        "model_max_length": ctx,
        "clean_up_tokenization_spaces": False,
    }
    template = field(r, "tokenizer.chat_template")
    if template:
        config["chat_template"] = template
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
    heads = int(field(r, f"{arch}.attention.head_count"))
    model = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(tokens),
        "hidden_size": int(field(r, f"{arch}.embedding_length")),
        "intermediate_size": int(field(r, f"{arch}.feed_forward_length")),
        "num_hidden_layers": int(field(r, f"{arch}.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(field(r, f"{arch}.attention.head_count_kv") or heads),
        "max_position_embeddings": ctx,
        "rope_theta": float(field(r, f"{arch}.rope.freq_base") or 10000.0),
        "rms_norm_eps": float(field(r, f"{arch}.attention.layer_norm_rms_epsilon")),
        "bos_token_id": field(r, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(r, "tokenizer.ggml.eos_token_id"),
        "torch_dtype": "bfloat16",
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(model, f, indent=2)
    print(f"wrote {out}: {len(tokens)} tokens, {len(merges)} merges, context {ctx}")


if __name__ == "__main__":
    main()
