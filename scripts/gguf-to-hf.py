#!/usr/bin/env python3
"""Write a llama GGUF model as a Hugging Face model folder, with transformers' own GGUF loader.

usage: gguf-to-hf.py MODEL.gguf OUT_DIR

The weights are dequantized (Q4_1 included; transformers reads them with the `gguf` package) to
float32, and the tokenizer is rebuilt from the GGUF's vocabulary and merges, with the chat
template the GGUF carries. Run by scripts/real-server for `transformers serve --real-model`:
that server loads Hugging Face folders. Offline: nothing is fetched from a hub.

Needs the Python packages torch, transformers, gguf (transformers' GGUF loader) and accelerate
(transformers loads a GGUF's weights through it); a missing one is named before anything runs.
"""
import importlib.util
import os
import sys

# Every package this script needs, checked first: transformers names a missing `gguf` or
# `accelerate` only deep inside a load, after minutes of work.
NEEDED = ("torch", "transformers", "gguf", "accelerate")
_missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
if _missing:
    sys.exit(f"gguf-to-hf: missing Python package(s): {' '.join(_missing)} "
             f"(pip install {' '.join(_missing)}); it needs {', '.join(NEEDED)}")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    gguf, out = sys.argv[1:]
    folder, name = os.path.split(os.path.abspath(gguf))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # A model loaded from a GGUF counts as "quantized with gguf" and refuses save_pretrained,
    # though its weights are already plain float32: the same weights in a model made from the
    # config alone (no quantization record) save as any other.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings may be absent from the state dict; anything else missing is a defect.
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        sys.exit(f"gguf-to-hf: weights do not match: missing {missing}, unexpected {unexpected}")
    model.generation_config = loaded.generation_config
    # transformers serve answers /v1/chat/completions only with a template; a GGUF without one
    # would give a folder that cannot chat, which must not pass silently.
    if not tok.chat_template:
        sys.exit(f"gguf-to-hf: {gguf} carries no chat template")
    tmp = out + ".tmp"
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    os.replace(tmp, out)
    print(f"gguf-to-hf: {model.config.model_type}, {model.num_parameters():,} parameters, "
          f"vocabulary {len(tok):,}, context {model.config.max_position_embeddings} -> {out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
