#!/usr/bin/env python3
"""Make random-weight GGUF files of real model shapes, for speed benchmarks.

Usage:
    python3 tools/make_random_gguf.py [--shapes NAME,...] [--formats FMT,...]
                                      [--out DIR] [--seed N] [--pure] [--force]
    python3 tools/make_random_gguf.py --list

The files are GGUFs of real architectures (llama; qwen2 with q/k/v biases;
qwen3moe with per-head q/k norms and a sparse MoE feed-forward; qwen3next,
Gated DeltaNet layers beside gated attention) whose
weights are random: the text they produce is noise, but the speed is real,
because the time of a forward pass depends on the shapes and formats, not on
the values. bench/compare uses them to compare kvad with llama.cpp on model
sizes the model store does not have.

Output: DIR/<shape>-<format>.gguf, DIR defaults to $KVAD_HOME/bench-models
(KVAD_HOME defaults to ~/.cache/kvad). A file that already exists is kept
unless --force, or unless it is not the shape's architecture (a file an
older version of this script wrote: then it is remade). The files are never
committed. Each file is written to a temporary name and renamed when
complete.

Shapes (tied embeddings unless said; head_dim = n_embd / n_head = 64 unless said):

  name                   arch     n_embd layers heads kv  n_ff  vocab   like
  smollm2-135m-rand      llama       576    30     9    3  1536  49152   SmolLM2-135M
  smollm2-360m-rand      llama       960    32    15    5  2560  49152   SmolLM2-360M
  qwen2.5-0.5b-rand      qwen2       896    24    14    2  4864  50000   Qwen2.5-0.5B body, 50k vocab
  llama3.2-1b-rand       llama      2048    16    32    8  8192 128256   Llama-3.2-1B
  qwen3moe-30b-a3b-rand  qwen3moe   2048     5    32    4     -  50000   Qwen3-30B-A3B layers
  qwen3next-80b-a3b-rand qwen3next  2048     8    16    2     -  50000   Qwen3-Next-80B-A3B layers

qwen2.5-0.5b-rand has Qwen2.5-0.5B's body in the qwen2 architecture (q/k/v
biases, f32, N(0, 0.02^2); NeoX rotary as llama.cpp's qwen2) with a 50,000-token
vocabulary instead of the real 151,936 ("Qwen2.5-0.5B (50k vocab)").
llama3.2-1b-rand has the real 128,256-token vocabulary but no llama3 rope
scaling (no rope_freqs tensor); the speed is the same.
qwen3moe-30b-a3b-rand has Qwen3-30B-A3B's layers exactly (32 q heads and 4 kv
heads of head_dim 128, so q is 4096 wide; attn_q_norm/attn_k_norm; 128
experts of expert_feed_forward_length 768, top-8, every layer sparse; the
f32 router ffn_gate_inp; rope base 1e6, rms eps 1e-6; an untied
output.weight), but 5 of its 48 layers and a 50,000-token vocabulary instead
of 151,936, so that Q4_K_M fits in 2 GB (1.9 GiB; Q8_0, made only when asked
for, is 3.3 GiB): with the real vocabulary the head would be a third of the
bytes a decoded token reads from a 5-layer file. Per token and layer the
work is the real model's, so prefill and decode speeds per layer are the
real model's.
qwen3next-80b-a3b-rand has Qwen3-Next-80B-A3B's layers exactly, in its layer
pattern (full_attention_interval 4: three Gated DeltaNet layers, then one
gated-attention layer), but 8 of its 48 layers (6 DeltaNet, 2 attention), 64
of its 512 experts and a 50,000-token vocabulary, so that Q4_K_M is 1.2 GiB:
  - gated attention: 16 q heads and 2 kv heads of head_dim 256; attn_q is
    2 x 16 x 256 = 8192 wide (the q of each head and its output gate, as
    llama.cpp's converter writes them); attn_q_norm/attn_k_norm; partial
    rotary (rope.dimension_count 64 = 256 x 0.25), rope base 1e7;
  - Gated DeltaNet: linear_num_key_heads 16, linear_num_value_heads 32,
    key/value head dim 128 (ssm.group_count 16, ssm.time_step_rank 32,
    ssm.state_size 128, ssm.inner_size 4096), conv kernel 4; llama.cpp's
    split projections attn_qkv (2048 -> 8192: q, k, v) and attn_gate
    (2048 -> 4096: z), ssm_ba (2048 -> 64), ssm_conv1d [4, 8192] F32, ssm_a
    (= -exp(A_log), A_log uniform in [0, log 16]), ssm_dt.bias, ssm_norm,
    ssm_out (4096 -> 2048);
  - every layer sparse: 64 experts of expert_feed_forward_length 512, top-10,
    and the shared expert (expert_shared_feed_forward_length 512) with its
    sigmoid gate ffn_gate_inp_shexp (F32: 1-D in llama.cpp, so
    llama-quantize keeps it); post_attention_norm; an untied output.weight;
    rms eps 1e-6.
  Per token and layer the work is the real model's except for the router's
  64 columns instead of 512 (a 2048 x 512 f32 product per token, about 1% of
  the layer's multiply-adds).

Tokenizer: tokens, token types, merges, model ("gpt2") and pre ("smollm") are
copied from the SmolLM2 GGUF in the model store
($KVAD_HOME/models/smollm2-135m.gguf, from scripts/setup); a vocabulary larger
than its 49,152 tokens is padded with "[PAD<i>]" tokens of type UNUSED, as
llama.cpp's convert_hf_to_gguf.py pads vocabularies.

Formats and the tensor-type rule (llama.cpp's llama_tensor_get_type in
src/llama-quant.cpp, without an imatrix; --pure turns it off, like
llama-quantize --pure):

  Q8_0    every 2-D weight Q8_0.
  Q4_0    every 2-D weight Q4_0, except the output matrix (the tied
          token_embd, or output.weight): Q6_K.
  Q4_1    as Q4_0 with Q4_1.
  Q4_K_M  Q4_K, except attn_v and ffn_down (ffn_down_exps, and
          ffn_down_shexp) of the layers where use_more_bits(i, n) holds
          (i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2): Q6_K; the output
          matrix: Q6_K. llama.cpp counts attn_qkv (a DeltaNet layer's) with
          attn_v, and every qwen3next layer has one of the two, so the same
          rule by layer index covers both.
  The MoE router ffn_gate_inp is never quantized (F32), nor are biases,
  norms, ssm_conv1d and ffn_gate_inp_shexp; an untied token_embd has the
  format's own type.
  Then llama.cpp's fallback for rows that are not a whole number of blocks:
  a 256-block type on a row length (ne[0]) that is not a multiple of 256
  becomes Q4_K -> Q5_0, Q6_K -> Q8_0. So with n_embd 576, 960 or 896 the
  tied token_embd is Q8_0, and in Q4_K_M attn_q/k/v/output and
  ffn_gate/up are Q5_0 (only ffn_down, whose rows are n_ff long, stays
  K-quant). This is what llama-quantize writes for these real models.
  Norm weights are F32.

Values: norm weights 1 + N(0, 0.02^2); other weights N(0, 0.02^2). Q8_0,
Q4_0, Q4_1 and Q5_0 are quantized from those values with gguf-py
(gguf.quants.quantize). gguf-py cannot quantize Q4_K or Q6_K, so those blocks
are random bytes with valid scales, written directly in ggml's block layout:
  Q4_K (144 bytes / 256 values): d = 1e-4, dmin = 8e-4 (f16); 6-bit
      sub-block scales sc in [16, 63], mins m = round(sc * 7.5 / 8), so a
      value d*sc*q - dmin*m is centred on 0 (std about 0.02); random 4-bit q.
  Q6_K (210 bytes / 256 values): random 6-bit q, int8 scales in
      +-[8, 127], d = 1.5e-5 (f16); std about 0.02.
All values are finite (checked with gguf-py's dequantize on the first
tensor of each type). The output is deterministic: each tensor's random
stream is seeded from --seed and the tensor's name.

Needs the PyPI packages gguf and numpy.
"""
import argparse
import os
import sys
import zlib
from pathlib import Path

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
except ImportError:
    sys.exit("make_random_gguf: needs the gguf package (pip install gguf)")

# name: (n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, rope_base, rms_eps, n_ctx_train, size_label, like)
SHAPES = {
    "smollm2-135m-rand": (576, 30, 9, 3, 1536, 49152, 100000.0, 1e-5, 8192, "135M", "SmolLM2-135M"),
    "smollm2-360m-rand": (960, 32, 15, 5, 2560, 49152, 100000.0, 1e-5, 8192, "360M", "SmolLM2-360M"),
    "qwen2.5-0.5b-rand": (896, 24, 14, 2, 4864, 50000, 1000000.0, 1e-6, 32768, "0.5B", "Qwen2.5-0.5B (50k vocab)"),
    "llama3.2-1b-rand": (2048, 16, 32, 8, 8192, 128256, 500000.0, 1e-5, 131072, "1B", "Llama-3.2-1B"),
    "qwen3moe-30b-a3b-rand": (2048, 5, 32, 4, 6144, 50000, 1000000.0, 1e-6, 40960, "5x128x0.8B",
                              "Qwen3-30B-A3B (5 of 48 layers, 50k vocab)"),
    "qwen3next-80b-a3b-rand": (2048, 8, 16, 2, 5120, 50000, 10000000.0, 1e-6, 262144, "8x64x0.4B",
                               "Qwen3-Next-80B-A3B (8 of 48 layers, 64 of 512 experts, 50k vocab)"),
}
# Options beyond the llama defaults: GGUF architecture, q/k/v biases (qwen2),
# per-head q/k RMSNorm (qwen3), head_dim when it is not n_embd / n_head, the
# MoE feed-forward (expert_count, expert_used_count, expert_feed_forward_length;
# every layer sparse), an untied output.weight, and the formats the shape is
# made in by default (--formats and bench/compare can still ask for others).
OPTIONS = {
    "qwen2.5-0.5b-rand": {"arch": "qwen2", "qkv_bias": True},
    "qwen3moe-30b-a3b-rand": {"arch": "qwen3moe", "qk_norm": True, "head_dim": 128, "untied": True,
                              "moe": (128, 8, 768), "formats": ("Q4_K_M",)},
    # qwen3next: "linear" = Gated DeltaNet layers (linear_num_key_heads, linear_num_value_heads,
    # linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim), full attention on
    # every full_attention_interval-th layer; "rope_dim" = head_dim x partial_rotary_factor.
    "qwen3next-80b-a3b-rand": {"arch": "qwen3next", "qk_norm": True, "head_dim": 256, "untied": True, "moe": (64, 10, 512),
                               "shared_expert": 512, "linear": (16, 32, 128, 128, 4), "full_attention_interval": 4,
                               "rope_dim": 64, "formats": ("Q4_K_M",)},
}
FORMATS = {"Q8_0": (QT.Q8_0, 7), "Q4_0": (QT.Q4_0, 2), "Q4_1": (QT.Q4_1, 3), "Q4_K_M": (QT.Q4_K, 15)}

WEIGHT_STD = 0.02


def option(shape, key, default=None):
    return OPTIONS.get(shape, {}).get(key, default)


def shape_formats(shape):
    """The formats a shape is made in by default (all of FORMATS unless OPTIONS says fewer)."""
    return list(option(shape, "formats", FORMATS))


def kvad_home():
    return Path(os.environ.get("KVAD_HOME") or Path.home() / ".cache" / "kvad")


def default_out():
    return kvad_home() / "bench-models"


def file_name(shape, fmt):
    return f"{shape}-{fmt}.gguf"


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def fallback(qtype, ncols):
    """llama.cpp's tensor_type_fallback for the types used here."""
    bs = gguf.GGML_QUANT_SIZES[qtype][0]
    if ncols % bs == 0:
        return qtype
    return {QT.Q4_K: QT.Q5_0, QT.Q6_K: QT.Q8_0}[qtype]


def tensor_type(name, ncols, fmt, n_layer, pure, tied=True):
    """The ggml type of a 2-D or 3-D weight, as llama-quantize picks it (see the module doc)."""
    base = FORMATS[fmt][0]
    if name.endswith("ffn_gate_inp.weight") or name.endswith("ffn_gate_inp_shexp.weight"):
        return QT.F32  # the router (never quantized, llama-quant.cpp) and the shared-expert gate (1-D there)
    if "ssm_conv1d" in name:  # Mamba-style short convolutions: never quantized (llama-quant.cpp)
        return QT.F32
    if pure:
        return fallback(base, ncols) if base in (QT.Q4_K, QT.Q6_K) else base
    t = base
    if name == "output.weight" or (tied and name == "token_embd.weight"):  # the output matrix
        if ncols % gguf.GGML_QUANT_SIZES[base][0] != 0:
            t = QT.Q8_0
        elif base != QT.Q8_0:
            t = QT.Q6_K
    elif fmt == "Q4_K_M" and (name.endswith("attn_v.weight") or name.endswith("attn_qkv.weight")
                              or ".ffn_down" in name):
        i = int(name.split(".")[1])
        if use_more_bits(i, n_layer):
            t = QT.Q6_K
    return fallback(t, ncols)


def rng_for(seed, name):
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def f16_bytes(x):
    return np.frombuffer(np.float16(x).tobytes(), dtype=np.uint8)


def random_q4_k(rng, n_blocks):
    """n_blocks Q4_K blocks: d, dmin (f16), scales[12] (packed 6-bit sc/m), qs[128]."""
    d, dmin = 1e-4, 8e-4
    sc = rng.integers(16, 64, size=(n_blocks, 8), dtype=np.uint8)
    m = np.rint(sc.astype(np.float32) * (7.5 * d / dmin)).astype(np.uint8)
    packed = np.empty((n_blocks, 12), dtype=np.uint8)
    # inverse of ggml's get_scale_min_k4
    packed[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    out = np.empty((n_blocks, 144), dtype=np.uint8)
    out[:, 0:2] = f16_bytes(d)
    out[:, 2:4] = f16_bytes(dmin)
    out[:, 4:16] = packed
    out[:, 16:144] = rng.integers(0, 256, size=(n_blocks, 128), dtype=np.uint8)
    return out


def random_q6_k(rng, n_blocks):
    """n_blocks Q6_K blocks: ql[128], qh[64], scales[16] (int8), d (f16)."""
    out = np.empty((n_blocks, 210), dtype=np.uint8)
    out[:, 0:192] = rng.integers(0, 256, size=(n_blocks, 192), dtype=np.uint8)
    mag = rng.integers(8, 128, size=(n_blocks, 16), dtype=np.int16)
    sign = np.where(rng.integers(0, 2, size=(n_blocks, 16)) == 0, -1, 1).astype(np.int16)
    out[:, 192:208] = (mag * sign).astype(np.int8).view(np.uint8)
    out[:, 208:210] = f16_bytes(1.5e-5)
    return out


def make_tensor(rng, rows, cols, qtype):
    """[rows, cols] weight as the bytes of qtype, shape (rows, bytes_per_row)."""
    if qtype == QT.F32:
        w = rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(WEIGHT_STD)
        return w.view(np.uint8).reshape(rows, cols * 4)
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    nb = cols // bs
    if qtype == QT.Q4_K:
        return random_q4_k(rng, rows * nb).reshape(rows, nb * ts)
    if qtype == QT.Q6_K:
        return random_q6_k(rng, rows * nb).reshape(rows, nb * ts)
    out = np.empty((rows, nb * ts), dtype=np.uint8)
    step = max(1, (1 << 24) // cols)  # quantize ~16M values at a time
    for r in range(0, rows, step):
        w = rng.standard_normal((min(step, rows - r), cols), dtype=np.float32) * np.float32(WEIGHT_STD)
        out[r:r + w.shape[0]] = gguf.quants.quantize(w, qtype)
    return out


def moe_plan(p, n_embd, moe, n_ff_shexp=None):
    """The sparse feed-forward's tensors of layer prefix p (and the shared expert's, qwen3next)."""
    n_exp, _, n_ff_exp = moe
    plan = [
        (p + "ffn_gate_inp.weight", (n_exp,), n_embd),
        (p + "ffn_gate_exps.weight", (n_exp, n_ff_exp), n_embd),
        (p + "ffn_up_exps.weight", (n_exp, n_ff_exp), n_embd),
        (p + "ffn_down_exps.weight", (n_exp, n_embd), n_ff_exp),
    ]
    if n_ff_shexp:
        plan += [
            (p + "ffn_gate_inp_shexp.weight", (1,), n_embd),
            (p + "ffn_gate_shexp.weight", (n_ff_shexp,), n_embd),
            (p + "ffn_up_shexp.weight", (n_ff_shexp,), n_embd),
            (p + "ffn_down_shexp.weight", (n_embd,), n_ff_shexp),
        ]
    return plan


def load_tokenizer(path):
    r = gguf.GGUFReader(path)

    def field(k):
        f = r.fields.get(k)
        if f is None:
            sys.exit(f"make_random_gguf: {path} has no {k}")
        return f.contents()

    return {
        "model": field("tokenizer.ggml.model"),
        "pre": field("tokenizer.ggml.pre"),
        "tokens": field("tokenizer.ggml.tokens"),
        "token_type": field("tokenizer.ggml.token_type"),
        "merges": field("tokenizer.ggml.merges"),
        "bos": field("tokenizer.ggml.bos_token_id"),
        "eos": field("tokenizer.ggml.eos_token_id"),
        "unk": field("tokenizer.ggml.unknown_token_id"),
        "pad": field("tokenizer.ggml.padding_token_id"),
    }


def check_finite(qtype, data, name):
    try:
        v = gguf.quants.dequantize(data.reshape(-1, data.shape[-1])[:64], qtype)
    except NotImplementedError:
        return
    if not np.all(np.isfinite(v)):
        sys.exit(f"make_random_gguf: {name}: non-finite values in {qtype.name}")
    print(f"    {qtype.name:5s} check on {name}: mean {v.mean():+.4f} std {v.std():.4f}", flush=True)


def write_model(path, shape, fmt, tok, seed, pure):
    n_embd, n_layer, n_head, n_kv, n_ff, n_vocab, rope_base, eps, n_ctx, label, like = SHAPES[shape]
    arch = option(shape, "arch", "llama")
    head_dim = option(shape, "head_dim", n_embd // n_head)
    moe = option(shape, "moe")  # (n_expert, n_expert_used, n_ff_exp) or None
    tied = not option(shape, "untied", False)
    tokens = list(tok["tokens"])
    types = list(tok["token_type"])
    if n_vocab < len(tokens):
        sys.exit(f"make_random_gguf: {shape}: vocab {n_vocab} < tokenizer's {len(tokens)}")
    for i in range(len(tokens), n_vocab):
        tokens.append(f"[PAD{i}]")
        types.append(int(gguf.TokenType.UNUSED))

    # (name, numpy shape of the rows = ggml ne[1:] reversed, or None for a 1-D f32 vector; cols = ne[0])
    plan = [("token_embd.weight", (n_vocab,), n_embd)]
    linear = option(shape, "linear")  # qwen3next: (Hk, Hv, Dk, Dv, conv_kernel) or None
    interval = option(shape, "full_attention_interval", 1)
    for i in range(n_layer):
        p = f"blk.{i}."
        if linear and (i + 1) % interval != 0:  # a Gated DeltaNet layer (llama.cpp's qwen3next names)
            hk, hv, dk, dv, kconv = linear
            conv_dim = 2 * hk * dk + hv * dv
            plan += [
                (p + "attn_norm.weight", None, n_embd),
                (p + "attn_qkv.weight", (conv_dim,), n_embd),
                (p + "attn_gate.weight", (hv * dv,), n_embd),
                (p + "ssm_ba.weight", (2 * hv,), n_embd),
                (p + "ssm_conv1d.weight", (conv_dim,), kconv),  # F32 (llama-quantize keeps it)
                (p + "ssm_a", None, hv),
                (p + "ssm_dt.bias", None, hv),
                (p + "ssm_norm.weight", None, dv),
                (p + "ssm_out.weight", (n_embd,), hv * dv),
                (p + "post_attention_norm.weight", None, n_embd),
            ]
            plan += moe_plan(p, n_embd, moe, option(shape, "shared_expert"))
            continue
        plan += [
            (p + "attn_norm.weight", None, n_embd),
            (p + "attn_q.weight", ((2 if linear else 1) * n_head * head_dim,), n_embd),  # qwen3next: q and its gate
            (p + "attn_k.weight", (n_kv * head_dim,), n_embd),
            (p + "attn_v.weight", (n_kv * head_dim,), n_embd),
        ]
        if option(shape, "qkv_bias"):
            plan += [(p + "attn_q.bias", None, n_head * head_dim), (p + "attn_k.bias", None, n_kv * head_dim),
                     (p + "attn_v.bias", None, n_kv * head_dim)]
        if option(shape, "qk_norm"):
            plan += [(p + "attn_q_norm.weight", None, head_dim), (p + "attn_k_norm.weight", None, head_dim)]
        plan += [
            (p + "attn_output.weight", (n_embd,), n_head * head_dim),
            (p + ("post_attention_norm.weight" if linear else "ffn_norm.weight"), None, n_embd),
        ]
        if moe:
            plan += moe_plan(p, n_embd, moe, option(shape, "shared_expert"))
        else:
            plan += [
                (p + "ffn_gate.weight", (n_ff,), n_embd),
                (p + "ffn_up.weight", (n_ff,), n_embd),
                (p + "ffn_down.weight", (n_embd,), n_ff),
            ]
    plan.append(("output_norm.weight", None, n_embd))
    if not tied:
        plan.append(("output.weight", (n_vocab,), n_embd))

    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), arch)
    w.add_type("model")
    w.add_name(f"random {like} shape")
    w.add_size_label(label)
    w.add_description(f"random weights of {like}'s shape, {fmt}, seed {seed}; for speed benchmarks only "
                      "(kvad tools/make_random_gguf.py)")
    w.add_block_count(n_layer)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    if head_dim != n_embd // n_head:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if moe:
        w.add_expert_count(moe[0])
        w.add_expert_used_count(moe[1])
        w.add_expert_feed_forward_length(moe[2])
    if option(shape, "shared_expert"):
        w.add_expert_shared_feed_forward_length(option(shape, "shared_expert"))
    linear = option(shape, "linear")
    if linear:
        hk, hv, dk, dv, kconv = linear
        w.add_ssm_conv_kernel(kconv)
        w.add_ssm_state_size(dk)
        w.add_ssm_group_count(hk)
        w.add_ssm_time_step_rank(hv)
        w.add_ssm_inner_size(hv * dv)
        w.add_full_attention_interval(option(shape, "full_attention_interval"))
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(eps)
    w.add_file_type(FORMATS[fmt][1])
    w.add_vocab_size(n_vocab)
    w.add_rope_dimension_count(option(shape, "rope_dim", head_dim))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_tokenizer_model(tok["model"])
    w.add_tokenizer_pre(tok["pre"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(list(tok["merges"]))
    w.add_bos_token_id(tok["bos"])
    w.add_eos_token_id(tok["eos"])
    w.add_unk_token_id(tok["unk"])
    w.add_pad_token_id(tok["pad"])
    w.add_add_bos_token(False)
    w.add_add_space_prefix(False)

    types_of = {}
    for name, rows, cols in plan:
        if rows is None:
            w.add_tensor_info(name, (cols,), np.dtype(np.float32), cols * 4)
            continue
        qt = tensor_type(name, cols, fmt, n_layer, pure, tied)
        types_of[name] = qt
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        n_rows = int(np.prod(rows))
        w.add_tensor_info(name, (*rows, cols // bs * ts), np.dtype(np.uint8), n_rows * (cols // bs) * ts,
                          raw_dtype=qt)

    w.write_header_to_file(path=tmp)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    checked = set()
    for name, rows, cols in plan:
        rng = rng_for(seed, name)
        if rows is None:
            if name.endswith("ssm_a"):  # -exp(A_log): negative, so that the decay exp(ssm_a * dt) is < 1
                w.write_tensor_data(-np.exp(rng.uniform(0.0, np.log(16.0), cols)).astype(np.float32))
            elif name.endswith(".bias"):
                w.write_tensor_data(rng.standard_normal(cols, dtype=np.float32) * np.float32(WEIGHT_STD))
            else:
                w.write_tensor_data(1.0 + rng.standard_normal(cols, dtype=np.float32) * np.float32(WEIGHT_STD))
            continue
        qt = types_of[name]
        data = make_tensor(rng, int(np.prod(rows)), cols, qt).reshape(*rows, -1)
        if qt not in checked:
            checked.add(qt)
            check_finite(qt, data, name)
        w.write_tensor_data(data)
    w.close()
    os.replace(tmp, path)
    counts = {}
    for qt in types_of.values():
        counts[qt.name] = counts.get(qt.name, 0) + 1
    print(f"  wrote {path} ({path.stat().st_size / 2**20:.1f} MiB; {counts})", flush=True)


def stale_reason(path, shape):
    """Why an existing file is not this shape's (made by an older version of this script), or ""."""
    try:
        r = gguf.GGUFReader(str(path))
        f = r.fields.get("general.architecture")
        arch = f.contents() if f is not None else "?"
        names = {t.name for t in r.tensors}
    except Exception as e:  # a truncated or foreign file
        return f"unreadable ({e})"
    want = option(shape, "arch", "llama")
    if arch != want:
        return f"architecture {arch}, not {want}"
    if option(shape, "qkv_bias") and "blk.0.attn_q.bias" not in names:
        return "no q/k/v biases"
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shape names (default: all)")
    ap.add_argument("--formats", default=None,
                    help="comma-separated formats (default: each shape's own, see --list)")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: $KVAD_HOME/bench-models)")
    ap.add_argument("--tokenizer", type=Path, default=None,
                    help="GGUF to copy the tokenizer from (default: $KVAD_HOME/models/smollm2-135m.gguf)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--pure", action="store_true", help="one format for every 2-D weight (llama-quantize --pure)")
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    ap.add_argument("--list", action="store_true", help="print the shapes and formats and exit")
    a = ap.parse_args()
    if a.list:
        for s, v in SHAPES.items():
            moe = option(s, "moe")
            print(f"{s:22s} {option(s, 'arch', 'llama'):8s} n_embd {v[0]:5d} layers {v[1]:3d} heads {v[2]:3d} "
                  f"kv {v[3]:2d} n_ff {v[4]:5d} vocab {v[5]:6d}"
                  + (f" experts {moe[0]} top-{moe[1]} n_ff_exp {moe[2]}" if moe else "")
                  + f"  ({v[10]}; {', '.join(shape_formats(s))})")
        print("formats:", ", ".join(FORMATS))
        return
    shapes = [s for s in a.shapes.split(",") if s]
    fmts = [f.upper() for f in a.formats.split(",") if f] if a.formats else None
    for s in shapes:
        if s not in SHAPES:
            sys.exit(f"make_random_gguf: unknown shape {s!r}; known: {', '.join(SHAPES)}")
    for f in fmts or []:
        if f not in FORMATS:
            sys.exit(f"make_random_gguf: unknown format {f!r}; known: {', '.join(FORMATS)}")
    out = a.out or default_out()
    out.mkdir(parents=True, exist_ok=True)
    tok_path = a.tokenizer or kvad_home() / "models" / "smollm2-135m.gguf"
    if not tok_path.exists():
        sys.exit(f"make_random_gguf: no tokenizer source {tok_path} (run scripts/setup --models-only)")
    tok = None
    for s in shapes:
        for f in fmts or shape_formats(s):
            name = file_name(s, f) if not a.pure else file_name(s, f + "-pure")
            path = out / name
            if path.exists() and not a.force:
                stale = stale_reason(path, s)
                if not stale:
                    print(f"  have {path}")
                    continue
                print(f"  remaking {path}: {stale}")
            if tok is None:
                tok = load_tokenizer(str(tok_path))
            print(f"  making {path} ...", flush=True)
            write_model(path, s, f, tok, a.seed, a.pure)


if __name__ == "__main__":
    main()
