#!/usr/bin/env python3
"""Write a copy of a llama-architecture GGUF whose attention sees only the last W tokens.

A real drafter-window cliff for the reference server (issue 45): the draft is the target's own
weights, bit for bit (quantized tensors copied raw), so below W tokens it computes exactly the
target's function and a greedy target accepts nearly every drafted token; past W every layer's
attention is a sliding window of W tokens (llama.cpp's standard SWA mask, as Mistral, Gemma and
DFlash drafts with --speculative-dflash-draft-window-size use), the first tokens of the context
(the attention sink a trained model leans on) drop out, and its predictions part from the
target's: acceptance falls along the context length, the cliff ctxbench's rule must name.

llama.cpp's "llama" architecture has no sliding window, so the copy is written as
"granite_swa" (src/models/granite-swa.cpp), which is the llama graph (pre-norm RMS, SwiGLU FFN,
normal RoPE, tied output when there is no output.weight) plus three things set here to be
neutral or windowed: logit_scale 1 (no logit scaling), residual/embedding/attention scales
absent (none applied, attention scale 1/sqrt(head_dim)), per-head attention sinks of -1e4 (an
extra softmax logit that takes no weight), and sliding_window W on every layer
(sliding_window_pattern all true). Every other key is copied with its "llama." prefix renamed.

usage: make-window-draft.py IN.gguf OUT.gguf WINDOW
"""

import sys

import gguf
import numpy as np

SRC_ARCH = "llama"
ARCH = "granite_swa"
# An extra softmax logit this low takes no weight beside any real attention score.
SINK_LOGIT = -1.0e4


def copy_fields(reader: gguf.GGUFReader, writer: gguf.GGUFWriter) -> None:
    for field in reader.fields.values():
        name = field.name
        # Fields the writer adds itself.
        if name == gguf.Keys.General.ARCHITECTURE or name.startswith("GGUF."):
            continue
        if name.startswith(SRC_ARCH + "."):
            name = ARCH + name[len(SRC_ARCH):]
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, out, window = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if window < 1:
        sys.exit("WINDOW must be at least 1 token")
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    if arch != SRC_ARCH:
        sys.exit(f"{src}: architecture {arch!r}, expected {SRC_ARCH!r}")
    n_layer = int(reader.fields[f"{SRC_ARCH}.block_count"].contents())
    n_head = int(reader.fields[f"{SRC_ARCH}.attention.head_count"].contents())
    writer = gguf.GGUFWriter(out, ARCH)
    copy_fields(reader, writer)
    name = reader.fields.get(gguf.Keys.General.NAME)
    base = name.contents() if name else "model"
    writer.add_string(gguf.Keys.General.NAME + ".window", f"{base}, sliding window {window}")
    writer.add_float32(f"{ARCH}.logit_scale", 1.0)
    writer.add_uint32(f"{ARCH}.attention.sliding_window", window)
    writer.add_array(f"{ARCH}.attention.sliding_window_pattern", [True] * n_layer)

    tensors = [(t.name, np.asarray(t.data), t.tensor_type) for t in reader.tensors]
    sinks = np.full(n_head, SINK_LOGIT, dtype=np.float32)
    tensors += [(f"blk.{i}.attn_sinks.weight", sinks, gguf.GGMLQuantizationType.F32)
                for i in range(n_layer)]
    for tname, data, qtype in tensors:
        writer.add_tensor_info(tname, data.shape, data.dtype, data.nbytes, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, data, _ in tensors:
        writer.write_tensor_data(data)
    writer.close()


if __name__ == "__main__":
    main()
