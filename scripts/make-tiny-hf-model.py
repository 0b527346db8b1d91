#!/usr/bin/env python3
"""Write a tiny random-weight Llama in Hugging Face format for the real SGLang, vLLM and
`transformers serve` servers.

Nothing is downloaded: the tokenizer is a byte-level BPE trained here with the `tokenizers`
library on the license texts every Debian system has (/usr/share/common-licenses), with <s>
(id 0, BOS, added by the post-processor) and </s> (id 1, EOS); the weights are random, so the
output is gibberish, but the compute per token is real and scales with context.
"""
import argparse
import glob
import json
import os

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def train_tokenizer(vocab_size: int) -> Tokenizer:
    files = sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f))
    if not files:
        raise SystemExit("no training text in /usr/share/common-licenses")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(files, trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    return tok


# A minimal chat template (`--chat-template`): BOS, then "role: content" lines, then
# "assistant:" when a reply is asked for. `transformers serve` answers /v1/chat/completions
# only when the tokenizer has one.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def add_chat_template(folder: str) -> None:
    """Writes CHAT_TEMPLATE into the saved tokenizer_config.json."""
    path = os.path.join(folder, "tokenizer_config.json")
    with open(path) as f:
        config = json.load(f)
    config["chat_template"] = CHAT_TEMPLATE
    with open(path, "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ff", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=65536)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--chat-template", action="store_true", help="add a minimal chat template")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    tok = train_tokenizer(a.vocab)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", model_max_length=a.ctx
    )
    fast.save_pretrained(a.out)
    if a.chat_template:
        add_chat_template(a.out)

    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=a.hidden,
        intermediate_size=a.ff,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        max_position_embeddings=a.ctx,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(a.out, safe_serialization=True)
    print(f"wrote {a.out}: vocab {tok.get_vocab_size()}, {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main()
