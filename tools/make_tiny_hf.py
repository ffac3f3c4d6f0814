#!/usr/bin/env python3
"""Tiny random HF checkpoints and transformers' logits for them.

For each architecture kvad reads from HF checkpoints (llama, gemma3_text,
qwen2, qwen3, mistral, gpt2, phi3, qwen3_moe) and rope/window option
(llama3, YaRN with and without truncate, Qwen2's use_sliding_window),
makes a randomly initialised model with small dimensions but the
architecture's real options (GQA with n_head != n_head_kv, a sliding window
shorter than the test prompt, untied and tied heads), saves it with
transformers' own save_pretrained (safetensors, f32, config.json), runs
transformers on fixed token ids and writes its logits at every position:

    tests/fixtures/hf_tiny/<name>/{config.json, model.safetensors, logits.json}

logits.json: {"tokens": [...], "logits": [[n_vocab floats] per position]}.
tests/model/test_hf_checkpoint.cpp compares kvad with them. Needs torch and
transformers (a venv for tools/, never the tests):

    ~/.cache/kvad/torch-venv/bin/python tools/make_tiny_hf.py
"""
import json
import os
import shutil
import sys
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "hf_tiny"
TOKENS = [1, 17, 42, 7, 99, 3, 64, 120, 5, 88, 31, 2, 77, 14]


ONLY = set(sys.argv[1:])  # names to remake; empty: all


def sharpen(model, s=8.0):
    """Scales q and k projections so that attention is far from uniform and
    the rotary frequencies (the rope scaling under test) move the logits."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "q_proj.weight" in n or "k_proj.weight" in n or "qkv_proj.weight" in n or "c_attn.weight" in n:
                p.mul_(s)
    return model


def save(name, model):
    if ONLY and name not in ONLY:
        return
    d = OUT / name
    if d.exists():
        shutil.rmtree(d)
    model.save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        p = d / extra
        if p.exists():
            p.unlink()
    with torch.no_grad():
        out = model(torch.tensor([TOKENS])).logits[0].float()
    logits = [[round(float(v), 6) for v in row] for row in out]
    (d / "logits.json").write_text(json.dumps({"tokens": TOKENS, "logits": logits}))
    print(name, sorted(p.name for p in d.iterdir()), sum(p.stat().st_size for p in d.iterdir()), "bytes")


def main():
    torch.manual_seed(0)
    llama = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, torch_dtype="float32")
    m = transformers.LlamaForCausalLM(llama).eval()
    save("llama", m)

    torch.manual_seed(1)
    gemma = transformers.Gemma3TextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
        sliding_window=4, rms_norm_eps=1e-6, rope_theta=1000000.0, rope_local_base_freq=10000.0,
        query_pre_attn_scalar=32, tie_word_embeddings=True, torch_dtype="float32",
        attn_implementation="eager")
    m = transformers.Gemma3ForCausalLM(gemma).eval()
    # Random norms (HF initialises them to 0, i.e. 1 + w = 1): exercise the 1 + w rule.
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.normal_(0.0, 0.3)
    save("gemma3", m)
    torch.manual_seed(2)
    qwen2 = transformers.Qwen2Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, torch_dtype="float32")
    m = transformers.Qwen2ForCausalLM(qwen2).eval()
    with torch.no_grad():  # random biases (HF initialises them to 0)
        for n, p in m.named_parameters():
            if n.endswith(".bias"):
                p.normal_(0.0, 0.5)
    save("qwen2", m)

    torch.manual_seed(3)
    qwen3 = transformers.Qwen3Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, torch_dtype="float32")
    m = transformers.Qwen3ForCausalLM(qwen3).eval()
    with torch.no_grad():  # random QK-norm weights (HF initialises them to 1)
        for n, p in m.named_parameters():
            if "q_norm" in n or "k_norm" in n:
                p.normal_(1.0, 0.3)
    save("qwen3", m)

    # Llama 3.x rope scaling: every region of the llama3 rule (high
    # frequencies kept, low ones divided by factor, the band between
    # smoothed) falls inside head_dim 16 with an original context of 64.
    torch.manual_seed(4)
    cfg = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="float32",
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    save("llama3", sharpen(transformers.LlamaForCausalLM(cfg).eval()))

    # Mistral: a sliding window (4) shorter than the test prompt, and linear
    # rope scaling.
    torch.manual_seed(5)
    cfg = transformers.MistralConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=256, sliding_window=4,
        rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="float32", attn_implementation="eager",
        rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})
    save("mistral", transformers.MistralForCausalLM(cfg).eval())

    # Qwen2 with YaRN: factor 4 over an original context of 256, so the
    # ramp between interpolated and extrapolated pairs covers pairs 0..4 of 8,
    # and the attention factor 0.1 ln 4 + 1 scales cos and sin.
    torch.manual_seed(6)
    cfg = transformers.Qwen2Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        rms_norm_eps=1e-6, tie_word_embeddings=True, torch_dtype="float32",
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 256})
    m = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith(".bias"):
                p.normal_(0.0, 0.5)
    save("qwen2_yarn", sharpen(m))

    # The same checkpoint (same seed, same weights) with YaRN's `truncate:
    # false` (gpt-oss's setting): the correction dims of beta_fast/beta_slow
    # are used as computed instead of floored/ceiled. beta_fast 20 and
    # beta_slow 1.5 put both dims off integers.
    torch.manual_seed(6)
    cfg = transformers.Qwen2Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        rms_norm_eps=1e-6, tie_word_embeddings=True, torch_dtype="float32",
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 256, "beta_fast": 20.0, "beta_slow": 1.5,
                         "truncate": False})
    m = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith(".bias"):
                p.normal_(0.0, 0.5)
    save("qwen2_yarn_notrunc", sharpen(m))

    # Qwen2 with use_sliding_window: max_window_layers 1 of 3 layers, so by
    # transformers' rule (layer i is windowed when i >= max_window_layers)
    # layer 0 attends to everything and layers 1-2 to a window of 4, shorter
    # than the prompt. transformers 5 also writes the rule out as layer_types.
    torch.manual_seed(11)
    cfg = transformers.Qwen2Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        use_sliding_window=True, sliding_window=4, max_window_layers=1,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, torch_dtype="float32",
        attn_implementation="eager")
    m = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith(".bias"):
                p.normal_(0.0, 0.5)
    save("qwen2_swa", sharpen(m, 4.0))

    # GPT-2: learned positions, LayerNorm with bias, fused c_attn (Conv1D,
    # stored [n_in, n_out]), GELU (tanh) MLP, tied head. Random biases and
    # LayerNorm weights (HF initialises them to 0 and 1). n_inner None
    # (4 · n_embd): llama.cpp's converter writes 4 · n_embd as
    # feed_forward_length whatever n_inner says. n_ctx: the converter reads it.
    torch.manual_seed(7)
    cfg = transformers.GPT2Config(
        vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64, n_ctx=64, n_inner=None,
        layer_norm_epsilon=1e-5, activation_function="gelu_new", tie_word_embeddings=True,
        torch_dtype="float32", attn_implementation="eager")
    m = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith(".bias"):
                p.normal_(0.0, 0.3)
            elif ".ln_" in n and n.endswith(".weight"):
                p.normal_(1.0, 0.3)
    save("gpt2", sharpen(m, 4.0))

    # Phi-3: fused qkv_proj and gate_up_proj, partial rotary (8 of 16 dims),
    # LongRoPE factors, a sliding window (8) shorter than the prompt. phi3:
    # an original context of 64, so kvad's 64-position test cache and
    # transformers' 14-token prompt both take the short factors; phi3_long:
    # the same with an original context of 8, so both take the long ones.
    for name, orig in (("phi3", 64), ("phi3_long", 8)):
        torch.manual_seed(8)
        cfg = transformers.Phi3Config(
            vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            original_max_position_embeddings=orig, sliding_window=8, rms_norm_eps=1e-5,
            tie_word_embeddings=False, torch_dtype="float32", attn_implementation="eager",
            pad_token_id=0, bos_token_id=1, eos_token_id=2,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                             "short_factor": [1.0, 1.3, 2.1, 3.7], "long_factor": [1.5, 3.0, 6.0, 11.0]})
        save(name, sharpen(transformers.Phi3ForCausalLM(cfg).eval(), 4.0))

    # Qwen3-MoE: 8 experts, top-2 without norm_topk_prob, layer 1 dense
    # (mlp_only_layers) and layer 2 sparse. Router weights scaled up so that
    # the top-k choice has clear margins (a near-tie would make the test
    # compare different experts, not arithmetic).
    torch.manual_seed(9)
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, torch_dtype="float32")
    m = transformers.Qwen3MoeForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("mlp.gate.weight"):
                p.normal_(0.0, 1.0)
            elif "q_norm" in n or "k_norm" in n:
                p.normal_(1.0, 0.3)
    save("qwen3moe", sharpen(m, 4.0))

    # The same family with every layer sparse (4 experts, top-2,
    # renormalised), which llama.cpp's converter also takes (it refuses
    # mlp_only_layers, and llama.cpp always renormalises qwen3moe): the
    # GGUF-path check of the expert tensors.
    torch.manual_seed(10)
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, torch_dtype="float32")
    m = transformers.Qwen3MoeForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("mlp.gate.weight"):
                p.normal_(0.0, 1.0)
    save("qwen3moe_sparse", sharpen(m, 4.0))
    print("transformers", transformers.__version__, "torch", torch.__version__)


if __name__ == "__main__":
    main()
