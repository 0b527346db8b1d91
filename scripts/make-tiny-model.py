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

--ffn-width W makes every layer's FFN W wide (llama.cpp's llama architecture has one
feed_forward_length for all layers): the identity layers get random W-wide gate/up matrices
(and a zero W-wide ffn_down), the random layers keep their --ff-wide random matrices padded
with zeros (extra gate/up rows and ffn_down columns of zero: silu(0) * 0 meets a zero column,
exactly 0). The same function again, but a decode step's cost is then dominated by reading
the weights, which a batch of tokens shares: the speculation target for which verifying 9
tokens costs little more than decoding 1 (llama.cpp multiplies zeros like any other weight).

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
per block). --dflash-draft --dflash-repeat-last writes a draft with hand-set weights instead,
whose answer is known: it proposes the block's anchor (the last accepted token) at every
position (see write_dflash_repeat_last_draft).
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
    ap.add_argument("--ffn-width", type=int, default=0,
                    help="width of every layer's FFN (default --ff): the identity layers get "
                         "random gate/up matrices this wide, the random layers are padded with "
                         "zeros to it (see the module docstring)")
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
    ap.add_argument("--dflash-repeat-last", action="store_true",
                    help="DFlash: instead of random weights, a draft that proposes the block's "
                         "anchor (the last accepted token) at every position")
    a = ap.parse_args()
    if a.dflash_draft:
        if a.dflash_repeat_last:
            write_dflash_repeat_last_draft(a)
        else:
            write_dflash_draft(a)
        return

    reader = GGUFReader(a.vocab)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    rng = np.random.default_rng(a.seed)
    head_dim = a.embd // a.heads
    n_embd_kv = head_dim * a.kv_heads

    width = a.ffn_width or a.ff
    if width < a.ff:
        raise SystemExit(f"--ffn-width {width} is narrower than --ff {a.ff}")

    w = GGUFWriter(a.out, "llama")
    name = "ctxbench-tiny-random"
    if a.identity_layers:
        name += f"-after-{a.identity_layers}-identity-layers"
    if width != a.ff:
        name += f"-ffn-{width}"
    w.add_name(name)
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.embd)
    w.add_block_count(a.identity_layers + a.layers)
    # One width for every layer: llama.cpp's llama architecture reads a single n_ff.
    w.add_feed_forward_length(width)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # all F32
    copy_tokenizer(reader, w)

    def t(name, *shape, scale=0.02, gen=rng, pad_rows=0, pad_cols=0):
        x = (gen.standard_normal(shape) * scale).astype(np.float32)
        if pad_rows or pad_cols:
            x = np.pad(x, ((0, pad_rows), (0, pad_cols)))
        w.add_tensor(name, x)

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
        t(f"blk.{i}.ffn_gate.weight", width, a.embd, gen=extra)
        t(f"blk.{i}.ffn_up.weight", width, a.embd, gen=extra)
        w.add_tensor(f"blk.{i}.ffn_down.weight", np.zeros((a.embd, width), dtype=np.float32))
    for i in range(a.identity_layers, a.identity_layers + a.layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(a.embd, dtype=np.float32))
        t(f"blk.{i}.attn_q.weight", a.embd, a.embd)
        t(f"blk.{i}.attn_k.weight", n_embd_kv, a.embd)
        t(f"blk.{i}.attn_v.weight", n_embd_kv, a.embd)
        t(f"blk.{i}.attn_output.weight", a.embd, a.embd)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(a.embd, dtype=np.float32))
        # Zero padding (the same random draws as the base model, then zeros): the extra
        # units have gate = up = 0, so silu(0) * 0 = 0 meets zero columns of ffn_down and
        # adds exactly 0.
        pad = width - a.ff
        t(f"blk.{i}.ffn_gate.weight", a.ff, a.embd, pad_rows=pad)
        t(f"blk.{i}.ffn_up.weight", a.ff, a.embd, pad_rows=pad)
        t(f"blk.{i}.ffn_down.weight", a.embd, a.ff, pad_cols=pad)
    w.add_tensor("output_norm.weight", np.ones(a.embd, dtype=np.float32))
    t("output.weight", n_vocab, a.embd)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dflash_writer(a, reader: GGUFReader, *, name: str, embd: int, heads: int, kv_heads: int,
                  head_dim: int, rope_dims: int) -> GGUFWriter:
    """A DFlash GGUF with its metadata written: the tensors are the caller's."""
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    if not 0 <= a.mask_token_id < n_vocab:
        raise SystemExit(f"--mask-token-id {a.mask_token_id} is outside the vocabulary ({n_vocab})")
    arch = "dflash"
    w = GGUFWriter(a.out, arch)
    w.add_name(name)
    w.add_context_length(a.ctx)
    w.add_embedding_length(embd)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(rope_dims)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(0)  # all F32
    # gguf 0.17.1 predates DFlash's keys: write them by name (llama-arch.cpp spells them).
    w.add_uint32(f"{arch}.block_size", a.block_size)
    w.add_array(f"{arch}.target_layers", target_layer_ids(a))
    copy_tokenizer(reader, w)
    w.add_uint32("tokenizer.ggml.mask_token_id", a.mask_token_id)
    return w


def target_layer_ids(a) -> list:
    ids = [int(x) for x in a.target_layers.split(",") if x.strip()]
    if not ids:
        raise SystemExit("--target-layers needs at least one layer id")
    return ids


def write_dflash_repeat_last_draft(a) -> None:
    """A DFlash draft with a known answer: every drafted position repeats the block's anchor.

    One layer, one 128-wide head. Its own token_embd E (random, plus a flag coordinate 0 = 1
    on every token, and for the mask token only coordinate 1 = 1) and its own output head
    (E without the flag coordinates, mask row zero). A mask position's query (flag 1) meets a
    large score only at keys with flag 0 set, i.e. the anchor (coordinate 127 of each, past
    the rotated dimensions so the score does not depend on the distance); the context's
    injected keys are zero (fc is zero), the other masks' too. So each mask position copies
    the anchor's embedding through identity V/O projections, and the output head's argmax
    is the anchor token. The target accepts a drafted position when it would repeat its last
    token there: acceptance is the target's own repetition rate.
    """
    reader = GGUFReader(a.vocab)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    embd = 128
    head_dim = embd
    w = dflash_writer(a, reader, name="ctxbench-tiny-dflash-draft-repeat-last", embd=embd,
                      heads=1, kv_heads=1, head_dim=head_dim, rope_dims=64)
    rng = np.random.default_rng([a.seed, 3])
    f32 = np.float32
    emb = rng.standard_normal((n_vocab, embd)).astype(f32)
    emb[:, 0] = 1.0
    emb[:, 1] = 0.0
    emb[a.mask_token_id, :] = 0.0
    emb[a.mask_token_id, 1] = 1.0
    out = emb.copy()
    out[:, :2] = 0.0
    out[a.mask_token_id, :] = 0.0
    n_inp = len(target_layer_ids(a)) * a.embd
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("fc.weight", np.zeros((embd, n_inp), dtype=f32))
    w.add_tensor("enc.output_norm.weight", np.ones(embd, dtype=f32))
    for i in range(a.layers):
        q = np.zeros((embd, embd), dtype=f32)
        q[head_dim - 1, 1] = 1.0  # mask flag -> the unrotated last dimension
        k = np.zeros((embd, embd), dtype=f32)
        k[head_dim - 1, 0] = 1.0  # token flag -> the same dimension
        v = np.eye(embd, dtype=f32)
        v[:2, :] = 0.0
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(embd, dtype=f32))
        w.add_tensor(f"blk.{i}.attn_q.weight", q)
        w.add_tensor(f"blk.{i}.attn_k.weight", k)
        w.add_tensor(f"blk.{i}.attn_v.weight", v)
        w.add_tensor(f"blk.{i}.attn_output.weight", np.eye(embd, dtype=f32))
        # After the per-head norms q and k are sqrt(128) * 3 on that dimension: the anchor's
        # score is ~100, every other key's 0.
        w.add_tensor(f"blk.{i}.attn_q_norm.weight", np.full(head_dim, 3.0, dtype=f32))
        w.add_tensor(f"blk.{i}.attn_k_norm.weight", np.full(head_dim, 3.0, dtype=f32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(embd, dtype=f32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", np.zeros((a.ff, embd), dtype=f32))
        w.add_tensor(f"blk.{i}.ffn_up.weight", np.zeros((a.ff, embd), dtype=f32))
        w.add_tensor(f"blk.{i}.ffn_down.weight", np.zeros((embd, a.ff), dtype=f32))
    w.add_tensor("output_norm.weight", np.ones(embd, dtype=f32))
    w.add_tensor("output.weight", out)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_dflash_draft(a) -> None:
    reader = GGUFReader(a.vocab)
    head_dim = a.embd // a.heads
    n_embd_kv = head_dim * a.kv_heads
    # The target's width: the draft reads hidden states of this size from each target layer.
    n_embd_inp = len(target_layer_ids(a)) * a.embd
    w = dflash_writer(a, reader, name="ctxbench-tiny-random-dflash-draft", embd=a.embd,
                      heads=a.heads, kv_heads=a.kv_heads, head_dim=head_dim, rope_dims=head_dim)
    # Its own stream: a draft never shares weights with the target of the same seed.
    rng = np.random.default_rng([a.seed, 2])

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
