#!/usr/bin/env python3
"""Write a tiny random-weight llama GGUF model for the reference server.

The tokenizer is copied from a vocab-only GGUF shipped in llama.cpp's source
(models/ggml-vocab-llama-spm.gguf, 32000 tokens); the weights are random, so the
output is gibberish, but the compute per token is real and scales with context.

--identity-layers N puts N layers in front of the random ones whose attention output
projection (attn_output) and FFN down projection (ffn_down) are all zeros: each adds exactly
0 to the residual stream, so the model computes the same function as the one without them
(same seed, same random weights) at (layers + N) / layers times the compute. They go first, not last: llama.cpp
keeps only the output rows in the last layer, so the random layers then run the very same
kernels as in the base model and the logits agree bit for bit. Tests use it for a speed
difference no host load can erase, and as a target its draft (the base model) always
predicts.
"""
import argparse

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter


def copy_tokenizer(reader: GGUFReader, writer: GGUFWriter) -> None:
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            sub = field.types[1]
            writer.add_array(name, field.contents())
            if sub not in (GGUFValueType.STRING, GGUFValueType.FLOAT32, GGUFValueType.INT32):
                raise SystemExit(f"unexpected array type {sub} for {name}")
        elif vtype == GGUFValueType.STRING:
            writer.add_string(name, field.contents())
        elif vtype == GGUFValueType.UINT32:
            writer.add_uint32(name, int(field.contents()))
        elif vtype == GGUFValueType.INT32:
            writer.add_int32(name, int(field.contents()))
        elif vtype == GGUFValueType.BOOL:
            writer.add_bool(name, bool(field.contents()))
        elif vtype == GGUFValueType.FLOAT32:
            writer.add_float32(name, float(field.contents()))
        else:
            raise SystemExit(f"unexpected type {vtype} for {name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--identity-layers", type=int, default=0)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ff", type=int, default=256)
    ap.add_argument("--ctx", type=int, default=1048576)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

    reader = GGUFReader(a.vocab)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    rng = np.random.default_rng(a.seed)
    head_dim = a.embd // a.heads
    n_embd_kv = head_dim * a.kv_heads

    w = GGUFWriter(a.out, "llama")
    name = "ctxbench-tiny-random"
    if a.identity_layers:
        name += f"-after-{a.identity_layers}-identity-layers"
    w.add_name(name)
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.embd)
    w.add_block_count(a.identity_layers + a.layers)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # all F32
    copy_tokenizer(reader, w)

    def t(name, *shape, scale=0.02, gen=rng):
        w.add_tensor(name, (gen.standard_normal(shape) * scale).astype(np.float32))

    # numpy shapes are (rows, cols) = ggml ne reversed.
    t("token_embd.weight", n_vocab, a.embd)
    # Their own generator: the random tensors of the base model stay exactly its own.
    extra = np.random.default_rng([a.seed, 1])
    for i in range(a.identity_layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(a.embd, dtype=np.float32))
        t(f"blk.{i}.attn_q.weight", a.embd, a.embd, gen=extra)
        t(f"blk.{i}.attn_k.weight", n_embd_kv, a.embd, gen=extra)
        t(f"blk.{i}.attn_v.weight", n_embd_kv, a.embd, gen=extra)
        w.add_tensor(f"blk.{i}.attn_output.weight", np.zeros((a.embd, a.embd), dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(a.embd, dtype=np.float32))
        t(f"blk.{i}.ffn_gate.weight", a.ff, a.embd, gen=extra)
        t(f"blk.{i}.ffn_up.weight", a.ff, a.embd, gen=extra)
        w.add_tensor(f"blk.{i}.ffn_down.weight", np.zeros((a.embd, a.ff), dtype=np.float32))
    for i in range(a.identity_layers, a.identity_layers + a.layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(a.embd, dtype=np.float32))
        t(f"blk.{i}.attn_q.weight", a.embd, a.embd)
        t(f"blk.{i}.attn_k.weight", n_embd_kv, a.embd)
        t(f"blk.{i}.attn_v.weight", n_embd_kv, a.embd)
        t(f"blk.{i}.attn_output.weight", a.embd, a.embd)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(a.embd, dtype=np.float32))
        t(f"blk.{i}.ffn_gate.weight", a.ff, a.embd)
        t(f"blk.{i}.ffn_up.weight", a.ff, a.embd)
        t(f"blk.{i}.ffn_down.weight", a.embd, a.ff)
    w.add_tensor("output_norm.weight", np.ones(a.embd, dtype=np.float32))
    t("output.weight", n_vocab, a.embd)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
