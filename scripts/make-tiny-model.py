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

--dflash-draft writes a DFlash block-diffusion draft (llama.cpp arch "dflash",
src/models/dflash.cpp) for the tiny target instead, laid out as llama.cpp's converter writes
one (conversion/qwen.py DFlashModel): the target's tokenizer plus tokenizer.ggml.mask_token_id
(the noise token of the draft block), dflash.block_size, dflash.target_layers (the target
layers whose *input* hidden states the draft reads, i.e. HF target_layer_ids + 1; the llama
graph exposes inputs of layers 0..n_layer-1, so for the 2-layer target it is [1]: the output
of layer 0), fc (concatenated target features -> draft width), enc.output_norm, Qwen3-style
layers (q/k norms) and output_norm. Like the published drafts it has no token_embd and no
output head: llama-server lends it the target's. Random weights: it accepts little, but it
runs the real DFlash path (feature injection into the draft's KV cache, one non-causal pass
per block).
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
    ap.add_argument("--dflash-draft", action="store_true",
                    help="write a DFlash draft for the tiny target (see the module docstring)")
    ap.add_argument("--target-layers", default="1",
                    help="DFlash: comma-separated target layer ids whose inputs the draft reads")
    ap.add_argument("--block-size", type=int, default=16,
                    help="DFlash: trained block size (a step drafts at most block_size - 1 tokens)")
    ap.add_argument("--mask-token-id", type=int, default=0,
                    help="DFlash: the noise token of the draft block (default 0, <unk>)")
    a = ap.parse_args()
    if a.dflash_draft:
        write_dflash_draft(a)
        return

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


def write_dflash_draft(a) -> None:
    reader = GGUFReader(a.vocab)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    if not 0 <= a.mask_token_id < n_vocab:
        raise SystemExit(f"--mask-token-id {a.mask_token_id} is outside the vocabulary ({n_vocab})")
    target_layers = [int(x) for x in a.target_layers.split(",") if x.strip()]
    if not target_layers:
        raise SystemExit("--target-layers needs at least one layer id")
    # Its own stream: a draft never shares weights with the target of the same seed.
    rng = np.random.default_rng([a.seed, 2])
    head_dim = a.embd // a.heads
    n_embd_kv = head_dim * a.kv_heads
    # The target's width: the draft reads hidden states of this size from each target layer.
    n_embd_tgt = a.embd
    n_embd_inp = len(target_layers) * n_embd_tgt

    arch = "dflash"
    w = GGUFWriter(a.out, arch)
    w.add_name("ctxbench-tiny-random-dflash-draft")
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.embd)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(0)  # all F32
    # gguf 0.17.1 predates DFlash's keys: write them by name (llama-arch.cpp spells them).
    w.add_uint32(f"{arch}.block_size", a.block_size)
    w.add_array(f"{arch}.target_layers", target_layers)
    copy_tokenizer(reader, w)
    w.add_uint32("tokenizer.ggml.mask_token_id", a.mask_token_id)

    def t(name, *shape, scale=0.02):
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def ones(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    # numpy shapes are (rows, cols) = ggml ne reversed.
    t("fc.weight", a.embd, n_embd_inp)
    ones("enc.output_norm.weight", a.embd)
    for i in range(a.layers):
        ones(f"blk.{i}.attn_norm.weight", a.embd)
        t(f"blk.{i}.attn_q.weight", a.embd, a.embd)
        t(f"blk.{i}.attn_k.weight", n_embd_kv, a.embd)
        t(f"blk.{i}.attn_v.weight", n_embd_kv, a.embd)
        t(f"blk.{i}.attn_output.weight", a.embd, a.embd)
        ones(f"blk.{i}.attn_q_norm.weight", head_dim)
        ones(f"blk.{i}.attn_k_norm.weight", head_dim)
        ones(f"blk.{i}.ffn_norm.weight", a.embd)
        t(f"blk.{i}.ffn_gate.weight", a.ff, a.embd)
        t(f"blk.{i}.ffn_up.weight", a.ff, a.embd)
        t(f"blk.{i}.ffn_down.weight", a.embd, a.ff)
    ones("output_norm.weight", a.embd)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
