#!/usr/bin/env python3
"""Tiny random HF checkpoints and transformers' logits for them.

For each architecture kvad reads from HF checkpoints (llama, gemma3_text,
qwen2, qwen3, mistral, gpt2, phi3, qwen3_moe, qwen3_next, gpt_oss,
deepseek_v2/v3, qwen3_5, qwen3_5_moe, qwen2_moe and mixtral) and rope/window option (llama3, YaRN with and without
truncate, Qwen2's use_sliding_window),
makes a randomly initialised model with small dimensions but the
architecture's real options (GQA with n_head != n_head_kv, a sliding window
shorter than the test prompt, untied and tied heads), saves it with
transformers' own save_pretrained (safetensors, f32, config.json), runs
transformers on fixed token ids and writes its logits at every position:

    tests/fixtures/hf_tiny/<name>/{config.json, model.safetensors, logits.json}

logits.json: {"tokens": [...], "logits": [[n_vocab floats] per position]}.
tests/model/test_hf_checkpoint.cpp and tests/model/text/ compare kvad with them. Needs torch and
transformers (a venv for tools/, never the tests):

    ~/.cache/kvad/torch-venv/bin/python tools/make_tiny_hf.py
"""
import copy
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


def save(name, model, tokens=TOKENS):
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
        out = model(torch.tensor([tokens])).logits[0].float()
    logits = [[round(float(v), 6) for v in row] for row in out]
    (d / "logits.json").write_text(json.dumps({"tokens": tokens, "logits": logits}))
    print(name, sorted(p.name for p in d.iterdir()), sum(p.stat().st_size for p in d.iterdir()), "bytes")


FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def mxfp4_pack(w):
    """OCP MX FP4 (e2m1 values, one e8m0 scale per 32) of w [..., n], n % 32 == 0,
    in the layout of OpenAI's gpt-oss checkpoints (what transformers'
    convert_moe_packed_tensors reads): blocks [..., n/32, 16] uint8, value 2k
    in the low nibble of byte k and 2k+1 in the high one, scales [..., n/32]
    uint8 (exponent + 127). Rounding is to the nearest value; the reference
    logits use transformers' dequantization of exactly these bytes."""
    x = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32).double()
    amax = x.abs().amax(-1, keepdim=True).clamp(min=1e-30)
    e = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    y = x / torch.pow(2.0, e)
    mag = torch.tensor(FP4, dtype=torch.float64)
    idx = (y.abs().unsqueeze(-1) - mag).abs().argmin(-1)
    code = (idx + 8 * (y < 0).long()).to(torch.uint8)
    blocks = code[..., 0::2] | (code[..., 1::2] << 4)
    return blocks.contiguous(), (e.squeeze(-1) + 127).to(torch.uint8).contiguous()


def save_gpt_oss_mxfp4(cfg):
    """gpt_oss's weights with MXFP4 experts, as OpenAI's checkpoints store
    them (mlp.experts.{gate_up,down}_proj_{blocks,scales}, quantization_config
    mxfp4), for llama.cpp's converter, which repacks them into GGUF MXFP4
    tensors. Reference: transformers' float model with the experts set to
    transformers' own dequantization of those bytes."""
    from safetensors.torch import save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    # Its own model: 2 layers (sliding, full), small experts and a router
    # with wide margins, so that rounding activations to q8_0 blocks (as
    # llama.cpp's and kvad's MXFP4 dot products do) moves the logits by
    # 2.5e-3 only, while experts with their columns shuffled (a wrong nibble
    # order) move them by 0.23.
    cfg = copy.deepcopy(cfg)
    cfg.num_hidden_layers = 2
    cfg.layer_types = ["sliding_attention", "full_attention"]
    torch.manual_seed(12)
    m = transformers.GptOssForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("sinks"):
                p.normal_(0.0, 1.5)
            elif n.endswith("_bias") or n.endswith(".bias"):
                p.normal_(0.0, 0.2)
            elif n.endswith("layernorm.weight") or n == "model.norm.weight":
                p.normal_(1.0, 0.2)
            elif n.endswith("router.weight"):
                p.normal_(0.0, 5.0)
            elif n.endswith("experts.gate_up_proj") or n.endswith("experts.down_proj"):
                p.normal_(0.0, 0.05)
    d = OUT / "gpt_oss_mxfp4"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    sd = {k: v.detach().clone().contiguous() for k, v in m.state_dict().items()}
    c = json.loads(cfg.to_json_string())
    # YaRN truncate true here (gpt_oss has the real false): the converter
    # writes no truncate key, so kvad's HF and GGUF paths, llama.cpp and
    # transformers all run the same rotary.
    c["rope_parameters"]["truncate"] = True
    c["architectures"] = ["GptOssForCausalLM"]
    rcfg = copy.deepcopy(cfg)
    rcfg.rope_parameters["truncate"] = True
    ref = transformers.GptOssForCausalLM(rcfg).eval()
    deq = dict(sd)
    for k in list(sd):
        if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
            blocks, scales = mxfp4_pack(sd[k].transpose(1, 2))  # rows: output features
            del sd[k]
            sd[k + "_blocks"], sd[k + "_scales"] = blocks, scales
            deq[k] = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
    ref.load_state_dict(deq)
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    c["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (d / "config.json").write_text(json.dumps(c, indent=2) + "\n")
    with torch.no_grad():
        out = ref(torch.tensor([TOKENS])).logits[0].float()
    logits = [[round(float(v), 6) for v in row] for row in out]
    (d / "logits.json").write_text(json.dumps({"tokens": TOKENS, "logits": logits}))
    print("gpt_oss_mxfp4", sorted(p.name for p in d.iterdir()), sum(p.stat().st_size for p in d.iterdir()), "bytes")


def save_kv_f16_logits(name, model, tokens, module="qwen3_next"):
    """transformers' logits with its attention's keys and values rounded to
    f16, as kvad's (and llama.cpp's default) KV cache stores them: the
    reference that isolates kvad's arithmetic from the cache format.
    module: the transformers model package whose eager attention is patched."""
    import importlib
    mod = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    eager = mod.eager_attention_forward

    def f16_kv(module, q, k, v, *args, **kw):
        return eager(module, q, k.half().float(), v.half().float(), *args, **kw)

    mod.eager_attention_forward = f16_kv
    try:
        with torch.no_grad():
            out = model(torch.tensor([tokens])).logits[0].float()
    finally:
        mod.eager_attention_forward = eager
    logits = [[round(float(v), 6) for v in row] for row in out]
    (OUT / name / "logits-kv-f16.json").write_text(json.dumps({"tokens": tokens, "logits": logits}))


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
    # gpt-oss: attention sinks, Q/K/V/O biases, 4:1 GQA, sliding (window 4
    # < 14 tokens) and full layers alternating, YaRN without truncation,
    # 8 experts top-2 with router and expert biases, the clamped SwiGLU.
    # Random sinks, biases and norm weights (HF initialises some to 0 / 1);
    # expert weights scaled so that gate and up often pass the limit 7 (the
    # clamps are exercised), router weights so the top-k has clear margins.
    torch.manual_seed(11)
    cfg = transformers.GptOssConfig(
        vocab_size=128, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
        sliding_window=4, rms_norm_eps=1e-5, num_local_experts=8, num_experts_per_tok=2,
        tie_word_embeddings=False, torch_dtype="float32", attn_implementation="eager",
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 128})
    m = transformers.GptOssForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("sinks"):
                p.normal_(0.0, 1.5)
            elif n.endswith("_bias") or n.endswith(".bias"):
                p.normal_(0.0, 0.5)
            elif n.endswith("layernorm.weight") or n == "model.norm.weight":
                p.normal_(1.0, 0.2)
            elif n.endswith("router.weight"):
                p.normal_(0.0, 1.0)
            elif n.endswith("experts.gate_up_proj"):
                p.normal_(0.0, 1.2)
            elif n.endswith("experts.down_proj"):
                p.normal_(0.0, 0.1)
    save("gpt_oss", sharpen(m, 4.0))
    # llama.cpp's converter writes no rope truncate key and llama.cpp always
    # rounds YaRN's correction dims: transformers' logits of the same weights
    # with truncate true are what kvad on the converted GGUF must give.
    if not ONLY or "gpt_oss" in ONLY:
        cfg.rope_parameters["truncate"] = True
        t = transformers.GptOssForCausalLM(cfg).eval()
        t.load_state_dict(m.state_dict())
        with torch.no_grad():
            out = t(torch.tensor([TOKENS])).logits[0].float()
        logits = [[round(float(v), 6) for v in row] for row in out]
        (OUT / "gpt_oss" / "logits-truncate.json").write_text(json.dumps({"tokens": TOKENS, "logits": logits}))
    if not ONLY or "gpt_oss_mxfp4" in ONLY:
        save_gpt_oss_mxfp4(cfg)

    deepseek()
    qwen3next_dense()

    # Qwen3-Next: gated DeltaNet layers (0, 1, 3, 4) beside gated attention
    # (2, 5: full_attention_interval 3), 2 key heads shared by 4 value heads,
    # a short convolution of 4, partial rotary 0.25 (4 of 16 dims), QK-norm,
    # zero-centred norms (random w, applied as 1 + w), 4 experts top-2
    # renormalised and a shared expert behind a sigmoid gate. 80 tokens:
    # transformers' chunked delta rule (chunks of 64) crosses a chunk boundary.
    # A_log drawn so that some heads forget slowly (A 0.05-2) and others fast.
    m = tiny_qwen3next(11, num_hidden_layers=6, full_attention_interval=3, mlp_only_layers=[])
    g = torch.Generator().manual_seed(12)
    tokens = torch.randint(0, 128, (80,), generator=g).tolist()
    save("qwen3next", sharpen(m, 2.0), tokens)
    if not ONLY or "qwen3next" in ONLY:
        save_kv_f16_logits("qwen3next", m, tokens)

    qwen35(tokens)
    qwen2moe()
    mixtral()
    gemma2()
    print("transformers", transformers.__version__, "torch", torch.__version__)


def qwen35(tokens):
    """Qwen3.5 (transformers' qwen3_5 / qwen3_5_moe): Qwen3-Next's layers with
    the DeltaNet projections split (in_proj_qkv with q | k | v of all heads,
    in_proj_z, in_proj_b, in_proj_a) and Qwen3-VL's interleaved MRoPE, which
    for text (three equal position ids) is NeoX rope over the partial rotary
    dims. 2 key heads to 6 value heads (r = 3): llama.cpp's converter reorders
    the value heads from HF's grouped order into its tiled one, and with r = 3
    every mapping but the right one moves the logits. Key and value head dims
    equal (llama.cpp's qwen35 assumes it). qwen35: dense MLP (Qwen3.5-27B);
    qwen35moe: 4 experts top-2 and a gated shared expert (Qwen3.5-35B-A3B);
    qwen35_vl: the dense one as the hub ships it, Qwen3_5ForConditionalGeneration
    (config model_type qwen3_5 with text_config, model.language_model.* and a
    tiny vision tower model.visual.* that text prompts never run)."""
    common = dict(
        vocab_size=128, hidden_size=64, num_hidden_layers=6, full_attention_interval=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, max_position_embeddings=256, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        tie_word_embeddings=False, initializer_range=0.1, torch_dtype="float32", attn_implementation="eager")

    def randomise(m):
        with torch.no_grad():
            for n, p in m.named_parameters():
                if n.endswith("mlp.gate.weight"):
                    p.normal_(0.0, 1.0)
                elif n.endswith("A_log"):
                    p.copy_(torch.empty_like(p).uniform_(0.05, 2.0).log())
                elif n.endswith("dt_bias"):
                    p.normal_(0.0, 0.5)
                elif n.endswith("linear_attn.norm.weight"):
                    p.normal_(1.0, 0.3)
                elif "norm" in n and "visual" not in n:
                    p.normal_(0.0, 0.3)
        return sharpen(m, 2.0)

    torch.manual_seed(21)
    cfg = transformers.Qwen3_5TextConfig(**common, intermediate_size=96)
    m = randomise(transformers.Qwen3_5ForCausalLM(cfg).eval())
    save("qwen35", m, tokens)
    if not ONLY or "qwen35" in ONLY:
        save_kv_f16_logits("qwen35", m, tokens, "qwen3_5")
    torch.manual_seed(22)
    cfg = transformers.Qwen3_5MoeTextConfig(**common, moe_intermediate_size=32, shared_expert_intermediate_size=64,
                                            num_experts=4, num_experts_per_tok=2)
    m = randomise(transformers.Qwen3_5MoeForCausalLM(cfg).eval())
    save("qwen35moe", m, tokens)
    if not ONLY or "qwen35moe" in ONLY:
        save_kv_f16_logits("qwen35moe", m, tokens, "qwen3_5_moe")
    torch.manual_seed(23)
    vision = dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, patch_size=4, spatial_merge_size=2,
                  temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=16)
    cfg = transformers.Qwen3_5Config(text_config=dict(common, intermediate_size=96), vision_config=vision,
                                     tie_word_embeddings=False)
    cfg.text_config._attn_implementation = "eager"
    m = randomise(transformers.Qwen3_5ForConditionalGeneration(cfg).eval())
    save("qwen35_vl", m, tokens)
    if not ONLY or "qwen35_vl" in ONLY:
        save_kv_f16_logits("qwen35_vl", m, tokens, "qwen3_5")


def deepseek():
    """DeepSeek V2 / V3 (MLA + routed MoE with shared experts). Dimensions
    small but every option real: kv_lora_rank 32 < n_head · head dims, a
    decoupled rotary part (qk_rope_head_dim 8) next to qk_nope_head_dim 16,
    v_head_dim != qk head dim, first_k_dense_replace 1 dense layer, then 8
    routed experts in 4 groups (2 of them kept) with top-2 plus shared experts,
    YaRN with DeepSeek's mscale / mscale_all_dim softmax correction."""
    common = dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
        v_head_dim=16, n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2,
        first_k_dense_replace=1, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
        torch_dtype="float32", attn_implementation="eager")

    def randomise(m, router=2.0):
        with torch.no_grad():
            for n, p in m.named_parameters():
                if n.endswith("mlp.gate.weight"):
                    p.normal_(0.0, router)
                elif "layernorm" in n or n.endswith("norm.weight"):
                    p.normal_(1.0, 0.3)
            for n, b in m.named_buffers():
                if n.endswith("e_score_correction_bias"):
                    b.normal_(0.0, 0.3)
        return m

    def sharpen_mla(m, s=4.0):
        with torch.no_grad():
            for n, p in m.named_parameters():
                if n.endswith(("q_proj.weight", "q_b_proj.weight", "kv_a_proj_with_mqa.weight")):
                    p.mul_(s)
        return m

    # V3 (DeepSeek-V3/R1, Kimi K2): q_lora_rank, sigmoid router with
    # e_score_correction_bias, noaux_tc over 4 groups (group score: the sum of
    # its top 2), norm_topk_prob, routed_scaling_factor; interleaved rope.
    # scoring_func as DeepSeek-V3's own config.json has it (transformers
    # ignores it; llama.cpp's converter reads it for expert_gating_func).
    torch.manual_seed(11)
    cfg = transformers.DeepseekV3Config(
        **common, q_lora_rank=24, n_shared_experts=1, routed_scaling_factor=2.5, norm_topk_prob=True,
        topk_method="noaux_tc", scoring_func="sigmoid", rope_interleave=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 1.0, "mscale_all_dim": 1.0})
    save("deepseek_v3", sharpen_mla(randomise(transformers.DeepseekV3ForCausalLM(cfg).eval())))

    # V2-Lite shape: no q_lora_rank (a direct q_proj), softmax router with
    # group_limited_greedy, 2 shared experts, YaRN with mscale 0.707 as
    # DeepSeek-V2-Lite's config. Top-3 from the best 1 of 2 groups (with the
    # group's max as its score, limiting only matters when k > topk_group).
    torch.manual_seed(12)
    v2 = dict(common, n_group=2, topk_group=1, num_experts_per_tok=3)
    cfg = transformers.DeepseekV2Config(
        **v2, q_lora_rank=None, n_shared_experts=2, routed_scaling_factor=1.5, norm_topk_prob=False,
        topk_method="group_limited_greedy",
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 0.707, "mscale_all_dim": 0.707})
    save("deepseek_v2_lite", sharpen_mla(randomise(transformers.DeepseekV2ForCausalLM(cfg).eval())))

    # V2 / V2.5 / Coder-V2 shape: q_lora_rank, greedy top-k, plain rope.
    torch.manual_seed(13)
    cfg = transformers.DeepseekV2Config(
        **common, q_lora_rank=24, n_shared_experts=1, routed_scaling_factor=1.0, norm_topk_prob=False,
        topk_method="greedy", rope_theta=10000.0)
    save("deepseek_v2", sharpen_mla(randomise(transformers.DeepseekV2ForCausalLM(cfg).eval())))
    deepseek_fp8()


FP8_BLOCK = 16  # DeepSeek-V3 uses 128; 16 gives the tiny matrices several blocks, edge blocks included


def deepseek_fp8():
    """deepseek_v3 re-saved as DeepSeek-V3/R1 ship it: every linear weight
    (attention, dense MLP, experts, shared experts) float8_e4m3fn with a
    float32 `weight_scale_inv` per FP8_BLOCK x FP8_BLOCK block (w = fp8 ·
    scale_inv), quantization_config as theirs, and one multi-token prediction
    layer model.layers.3.* (num_nextn_predict_layers 1: eh_proj, enorm,
    hnorm, shared_head, embed_tokens and a decoder layer) that transformers
    does not run. logits.json: transformers on the dequantized weights
    (torch's own float8 → float32), without the MTP layer; dequantized.json:
    torch's dequantized values of one matrix."""
    name = "deepseek_v3_fp8"
    if ONLY and name not in ONLY:
        return
    import tempfile
    from safetensors.torch import load_file, save_file
    src = OUT / "deepseek_v3"
    tensors = load_file(src / "model.safetensors")
    cfg = json.loads((src / "config.json").read_text())
    g = torch.Generator().manual_seed(14)
    # The MTP layer: a decoder layer like layer 2 (MoE) plus its own parts.
    n_layer, E, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]
    mtp = f"model.layers.{n_layer}."
    for k, v in list(tensors.items()):
        if k.startswith(f"model.layers.{n_layer - 1}."):
            tensors[mtp + k[len(f"model.layers.{n_layer - 1}."):]] = v + 0.01 * torch.randn(v.shape, generator=g)
    tensors[mtp + "eh_proj.weight"] = 0.1 * torch.randn(E, 2 * E, generator=g)
    for n in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight"):
        tensors[mtp + n] = 1.0 + 0.3 * torch.randn(E, generator=g)
    tensors[mtp + "shared_head.head.weight"] = 0.1 * torch.randn(V, E, generator=g)
    tensors[mtp + "embed_tokens.weight"] = 0.1 * torch.randn(V, E, generator=g)

    def fp8_matrix(k, v):
        return (v.dim() == 2 and k.endswith("_proj.weight") and ("self_attn." in k or "mlp." in k)) or \
            k.endswith("eh_proj.weight")

    out, dequant = {}, {}
    B = FP8_BLOCK
    for k, v in tensors.items():
        if not fp8_matrix(k, v):
            out[k] = v.contiguous()
            dequant[k] = v
            continue
        r, c = v.shape
        sr, sc = (r + B - 1) // B, (c + B - 1) // B
        scale = torch.empty(sr, sc, dtype=torch.float32)
        q = torch.empty(r, c, dtype=torch.float8_e4m3fn)
        for i in range(sr):
            for j in range(sc):
                blk = v[i * B:(i + 1) * B, j * B:(j + 1) * B]
                s = blk.abs().max().clamp(min=1e-12) / 448.0
                scale[i, j] = s
                q[i * B:(i + 1) * B, j * B:(j + 1) * B] = (blk / s).to(torch.float8_e4m3fn)
        out[k] = q
        out[k + "_scale_inv"] = scale
        full = scale.repeat_interleave(B, 0)[:r].repeat_interleave(B, 1)[:, :c]
        dequant[k] = q.to(torch.float32) * full
    d = OUT / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    save_file(out, d / "model.safetensors", metadata={"format": "pt"})
    cfg_fp8 = dict(cfg, num_nextn_predict_layers=1, quantization_config={
        "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [B, B]})
    (d / "config.json").write_text(json.dumps(cfg_fp8, indent=2, sort_keys=True) + "\n")
    # transformers on the dequantized weights (the MTP layer left out: it has no module for it).
    with tempfile.TemporaryDirectory() as tmp:
        save_file({k: v.contiguous() for k, v in dequant.items() if not k.startswith(mtp)}, Path(tmp) / "model.safetensors",
                  metadata={"format": "pt"})
        (Path(tmp) / "config.json").write_text(json.dumps(cfg))
        m = transformers.DeepseekV3ForCausalLM.from_pretrained(tmp, attn_implementation="eager").eval()
        with torch.no_grad():
            logits = m(torch.tensor([TOKENS])).logits[0].float()
    (d / "logits.json").write_text(json.dumps({"tokens": TOKENS, "logits": [[round(float(x), 6) for x in row]
                                                                             for row in logits]}))
    k = "model.layers.1.self_attn.kv_a_proj_with_mqa.weight"
    (d / "dequantized.json").write_text(json.dumps({"tensor": k, "shape": list(dequant[k].shape),
                                                    "values": [float(x) for x in dequant[k].flatten()]}))
    print(name, sorted(p.name for p in d.iterdir()), sum(p.stat().st_size for p in d.iterdir()), "bytes")


def tiny_qwen3next(seed, **layers):
    """The tiny Qwen3-Next of the qwen3next fixtures: 2 key heads shared by 4
    value heads, a short convolution of 4, partial rotary 0.25 (4 of 16
    dims), QK-norm, zero-centred norms (random w, applied as 1 + w), 4
    experts top-2 renormalised and a shared expert behind a sigmoid gate;
    A_log drawn so that some heads forget slowly (A 0.05-2) and others fast.
    `layers`: num_hidden_layers, full_attention_interval, mlp_only_layers."""
    torch.manual_seed(seed)
    cfg = transformers.Qwen3NextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        shared_expert_intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        partial_rotary_factor=0.25, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
        norm_topk_prob=True, decoder_sparse_step=1, max_position_embeddings=256, rms_norm_eps=1e-6,
        rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.1, torch_dtype="float32",
        attn_implementation="eager", **layers)
    m = transformers.Qwen3NextForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("mlp.gate.weight"):
                p.normal_(0.0, 1.0)
            elif n.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.05, 2.0).log())
            elif n.endswith("dt_bias"):
                p.normal_(0.0, 0.5)
            elif n.endswith("linear_attn.norm.weight"):
                p.normal_(1.0, 0.3)
            elif "norm" in n:
                p.normal_(0.0, 0.3)
    return m


def qwen3next_dense():
    """Qwen3-Next with dense MLP layers (config mlp_only_layers: those layers
    have transformers' Qwen3NextMLP of intermediate_size instead of the MoE):
    4 layers, DeltaNet at 0 and 2 and gated attention at 1 and 3
    (full_attention_interval 2), dense MLPs at 0 and 1 (one of each mixer
    kind), MoE with a shared expert at 2 and 3. The dense MLP is 96 wide, the
    experts 32, the shared expert 64, so that a layer read as the wrong kind
    fails. Otherwise as the qwen3next fixture; 80 tokens (past one chunk of 64)."""
    if ONLY and "qwen3next_dense" not in ONLY:
        return
    m = tiny_qwen3next(21, num_hidden_layers=4, full_attention_interval=2, mlp_only_layers=[0, 1])
    assert [type(layer.mlp).__name__ for layer in m.model.layers] == \
        ["Qwen3NextMLP", "Qwen3NextMLP", "Qwen3NextSparseMoeBlock", "Qwen3NextSparseMoeBlock"]
    g = torch.Generator().manual_seed(22)
    tokens = torch.randint(0, 128, (80,), generator=g).tolist()
    save("qwen3next_dense", sharpen(m, 2.0), tokens)
    save_kv_f16_logits("qwen3next_dense", m, tokens)


EXPERT_SCALE = 2.0  # qwen2moe*: the routed experts' weights x 2 (flipping norm_topk_prob then moves the logits by 1.3e-2)


def qwen2moe():
    """Qwen2-MoE (transformers' qwen2_moe; Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B):
    Qwen2's attention (q/k/v biases, drawn at random here, GQA 2:1) and a
    sparse MoE block of 8 experts, top-2, with a shared expert behind a
    per-token sigmoid gate (shared_expert_gate), untied head.
    qwen2moe: every layer sparse and norm_topk_prob false (Qwen2MoeConfig's
    default, and all that llama.cpp's qwen2moe graph does), which llama.cpp's
    converter and loader take. qwen2moe_dense: layer 1 dense (mlp_only_layers,
    96 wide), norm_topk_prob true: the HF path only (llama.cpp's loader wants
    a router in every layer). Experts 32 wide, the shared expert 48 (64 in
    qwen2moe, whose unused intermediate_size is 64 = 2 x 32: Qwen1.5-MoE's
    relations, 5632 = 4 x 1408 = shared width, which llama.cpp's loader falls
    back on for GGUFs without the expert widths), so a matrix read as the
    wrong one fails. Router and shared-gate weights drawn
    N(0, 1) so that the top-k choice has margins and the gate varies by token;
    the routed experts' weights scaled up so that their share of the output
    (and with it the router's weights, norm_topk_prob) shows in the logits."""
    for name, seed, dense, norm, f_dense, f_sh in (("qwen2moe", 31, [], False, 64, 64),
                                                   ("qwen2moe_dense", 32, [1], True, 96, 48)):
        swa = name == "qwen2moe" and (not ONLY or "qwen2moe_swa" in ONLY)
        if ONLY and name not in ONLY and not swa:
            continue
        torch.manual_seed(seed)
        cfg = transformers.Qwen2MoeConfig(
            vocab_size=128, hidden_size=64, intermediate_size=f_dense, moe_intermediate_size=32,
            shared_expert_intermediate_size=f_sh, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=256, num_experts=8, num_experts_per_tok=2, norm_topk_prob=norm,
            decoder_sparse_step=1, mlp_only_layers=dense, rms_norm_eps=1e-6, rope_theta=1000000.0,
            tie_word_embeddings=False, torch_dtype="float32")
        m = transformers.Qwen2MoeForCausalLM(cfg).eval()
        with torch.no_grad():
            for n, p in m.named_parameters():
                if n.endswith("mlp.gate.weight") or n.endswith("shared_expert_gate.weight"):
                    p.normal_(0.0, 1.0)
                elif n.endswith("_proj.bias"):
                    p.normal_(0.0, 0.5)
                elif ".mlp.experts." in n:
                    p.mul_(EXPERT_SCALE)
        kinds = [type(layer.mlp).__name__ for layer in m.model.layers]
        assert kinds == ["Qwen2MoeSparseMoeBlock" if i not in dense else "Qwen2MoeMLP" for i in range(3)], kinds
        save(name, sharpen(m, 4.0))
        if swa:
            save_qwen2moe_swa(m)


def save_qwen2moe_swa(m):
    """qwen2moe's weights with use_sliding_window (window 4 < 14 tokens):
    transformers' Qwen2MoeConfig windows the layers it lists in layer_types
    as sliding_attention (here 0 and 2; 1 full). Only config.json and
    logits.json are written (tests/fixtures/hf_tiny/qwen2moe_swa); the test
    reads them beside qwen2moe's model.safetensors."""
    cfg = copy.deepcopy(m.config.to_dict())
    cfg.update(use_sliding_window=True, sliding_window=4, layer_types=None)
    cfg.pop("transformers_version", None)
    cfg = transformers.Qwen2MoeConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    assert cfg.layer_types == ["sliding_attention", "full_attention", "sliding_attention"], cfg.layer_types
    w = transformers.Qwen2MoeForCausalLM(cfg).eval()
    w.load_state_dict(m.state_dict())
    save_windowed("qwen2moe_swa", w, m)


def save_windowed(name, w, m):
    """A windowed variant `w` of model `m` (the same weights): only its
    config.json and its logits.json go to tests/fixtures/hf_tiny/<name>; the
    tests read them beside m's model.safetensors. Prints how far the window
    moves the logits."""
    d = OUT / name
    if d.exists():
        shutil.rmtree(d)
    w.save_pretrained(d, safe_serialization=True)
    for p in d.iterdir():
        if p.name != "config.json":
            p.unlink()
    with torch.no_grad():
        out = w(torch.tensor([TOKENS])).logits[0].float()
        full = m(torch.tensor([TOKENS])).logits[0].float()
    print(name + ": windowed vs full attention", float((out - full).abs().max() / full.abs().max()))
    logits = [[round(float(v), 6) for v in row] for row in out]
    (d / "logits.json").write_text(json.dumps({"tokens": TOKENS, "logits": logits}))


def mixtral():
    """Mixtral (transformers' mixtral; Mixtral-8x7B / 8x22B): Mistral's
    attention (GQA 2:1, sliding_window null as in Mixtral's configs) and in
    every layer a sparse MoE block of 8 SwiGLU experts (intermediate_size 48
    wide), top-2, the two softmax weights renormalised to sum 1
    (MixtralTopKRouter), untied head. save_pretrained writes the experts as
    Mixtral's checkpoints do (block_sparse_moe.experts.E.w1/w2/w3, the router
    block_sparse_moe.gate). The router's weights are drawn N(0, 0.2), so that
    the top two experts carry about half the probability (the renormalisation
    then doubles them) yet the top-2 choice keeps margins; the experts'
    weights x 2 so that their output shows in the logits. mixtral_swa: the
    same weights with sliding_window 4 < 14 tokens (config.json and
    logits.json only; the test reads them beside mixtral's safetensors)."""
    if ONLY and not ONLY & {"mixtral", "mixtral_swa"}:
        return
    torch.manual_seed(41)
    cfg = transformers.MixtralConfig(
        vocab_size=128, hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, num_local_experts=8, num_experts_per_tok=2,
        sliding_window=None, rms_norm_eps=1e-5, rope_theta=1000000.0, tie_word_embeddings=False,
        torch_dtype="float32", attn_implementation="eager")
    m = transformers.MixtralForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("mlp.gate.weight"):
                p.normal_(0.0, 0.2)
            elif ".mlp.experts." in n:
                p.mul_(2.0)
    assert all(type(layer.mlp).__name__ == "MixtralSparseMoeBlock" for layer in m.model.layers)
    m = sharpen(m, 4.0)
    with torch.no_grad():  # the router's top-2 share of the probability, per token and layer
        h = m.model.embed_tokens(torch.tensor([TOKENS]))
        share = []
        for layer in m.model.layers:
            n = layer.post_attention_layernorm(h)  # a rough probe (before attention): only printed
            probs = torch.softmax(layer.mlp.gate.weight @ n[0].T, dim=0)
            share.append(float(probs.topk(2, dim=0).values.sum(0).mean()))
    print("mixtral: mean top-2 router probability (probe)", share)
    save("mixtral", m)
    if ONLY and "mixtral_swa" not in ONLY:
        return
    w = copy.deepcopy(m)
    w.config.sliding_window = 4  # the layers and the mask read the model's one config
    save_windowed("mixtral_swa", w, m)


def gemma2():
    """Gemma 2 (transformers' gemma2; gemma-2-2b/9b/27b): Gemma 3's blocks
    (pre and post norms around attention and MLP, GeGLU-tanh, embeddings
    scaled by sqrt(n_embd), (1 + w) norms, random here) without QK-norm, with
    attention logit soft-capping and final logit soft-capping, and sliding
    and full layers in turn (layer_types: 0 and 2 slide, window 4 < 14
    tokens). head_dim 32 != n_embd / n_head, GQA 2:1, tied head. The caps
    are made to matter: q/k scaled x8 with attn_logit_softcapping 2, and
    final_logit_softcapping 0.5 (the tiny model's raw logits reach 0.6);
    the script prints how far transformers' logits move without each cap
    (0.64 and 0.44 of max |logit|)."""
    if ONLY and "gemma2" not in ONLY:
        return
    torch.manual_seed(41)
    cfg = transformers.Gemma2Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
        sliding_window=4, rms_norm_eps=1e-6, rope_theta=10000.0, query_pre_attn_scalar=32,
        attn_logit_softcapping=2.0, final_logit_softcapping=0.5, tie_word_embeddings=True,
        torch_dtype="float32", attn_implementation="eager")
    assert cfg.layer_types == ["sliding_attention", "full_attention"] * 2, cfg.layer_types
    m = transformers.Gemma2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.normal_(0.0, 0.3)
    sharpen(m, 8.0)
    with torch.no_grad():
        ref = m(torch.tensor([TOKENS])).logits[0].float()
        for field in ("attn_logit_softcapping", "final_logit_softcapping"):
            keep = getattr(m.config, field)
            setattr(m.config, field, None)
            for layer in m.model.layers:
                layer.self_attn.attn_logit_softcapping = m.config.attn_logit_softcapping
            out = m(torch.tensor([TOKENS])).logits[0].float()
            setattr(m.config, field, keep)
            for layer in m.model.layers:
                layer.self_attn.attn_logit_softcapping = m.config.attn_logit_softcapping
            print("gemma2: without", field, float((out - ref).abs().max() / ref.abs().max()))
    save("gemma2", m)


if __name__ == "__main__":
    main()
