#!/usr/bin/env python3
"""A random Qwen3-MoE HF checkpoint big enough to measure loading (542 MB,
bf16: 8 layers of 48 experts, hidden 512, moe_intermediate 384), with
SmolLM2's tokenizer files so that `kvad run -m DIR` takes it. Not a test
fixture (nothing is committed); it measured the quantize-once cache hit and
--quant none loads (zero-copy experts):

    ~/.cache/kvad/torch-venv/bin/python tools/make_random_moe_checkpoint.py /tmp/moe \
        ~/.cache/kvad/hf-cache/models--HuggingFaceTB--SmolLM2-135M-Instruct
    KVAD_HOME=/tmp/moe-home /usr/bin/time -f "%e s %M KB" build/kvad run -m /tmp/moe --quant q8_0 -p hi -n 1 -t 2
"""
import glob
import shutil
import sys

import torch
import transformers


def main():
    out, smollm2 = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=49152, hidden_size=512, intermediate_size=1024, moe_intermediate_size=384, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
        num_experts=48, num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, torch_dtype="bfloat16")
    m = transformers.Qwen3MoeForCausalLM(cfg).to(torch.bfloat16).eval()
    m.save_pretrained(out, safe_serialization=True)
    snap = glob.glob(smollm2 + "/snapshots/*/")[0]
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(snap + f, out + "/" + f)


if __name__ == "__main__":
    main()
