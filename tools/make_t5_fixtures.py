#!/usr/bin/env python3
"""Makes tests/fixtures/t5/: tiny random T5EncoderModels (transformers) as
save_pretrained writes them, and what transformers computes for them in f32,
which tests/model/image/test_t5_encoder.cpp compares kvad's T5Encoder against.

    /work/wt/venv-pictures/bin/python tools/make_t5_fixtures.py

gated/       T5 v1.1's shape (FLUX's text_encoder_2, shrunk): feed_forward_proj
             gated-gelu (gelu_new), d_model 64, d_kv 16, 4 heads, d_ff 96,
             2 layers, 32 buckets up to distance 20 (so sequences of 40 and 150
             tokens reach the logarithmic and the clipped buckets), one
             model.safetensors.
relu/        T5 v1.0's shape: feed_forward_proj relu, d_model 32, d_kv 8 x 4
             heads (inner width 32), d_ff 48, 2 layers, 16 buckets up to 12,
             saved in shards (model.safetensors.index.json).
reference.safetensors
             per config NAME and sequence i: NAME.ids.i [n] (i32) and
             NAME.hidden.i [n, d_model] (f32 last_hidden_state, no attention
             mask, as FluxPipeline._get_t5_prompt_embeds calls it); and
             buckets.B.D [601] (i32): T5Attention._relative_position_bucket
             (bidirectional) of relative positions -300..300 for B buckets
             up to distance D, for FLUX's (32, 128) and the configs'.
"""
import os

import torch
from safetensors.torch import save_file
from transformers import T5Config, T5EncoderModel
from transformers.models.t5.modeling_t5 import T5Attention

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "t5")

CONFIGS = {
    "gated": dict(vocab_size=128, d_model=64, d_kv=16, num_heads=4, d_ff=96, num_layers=2,
                  feed_forward_proj="gated-gelu", relative_attention_num_buckets=32,
                  relative_attention_max_distance=20),
    "relu": dict(vocab_size=128, d_model=32, d_kv=8, num_heads=4, d_ff=48, num_layers=2,
                 feed_forward_proj="relu", relative_attention_num_buckets=16, relative_attention_max_distance=12),
}
LENGTHS = [1, 7, 40, 150]


def main():
    torch.manual_seed(0)
    ref = {}
    for name, kw in CONFIGS.items():
        cfg = T5Config(dropout_rate=0.0, layer_norm_epsilon=1e-6, **kw)
        model = T5EncoderModel(cfg).float().eval()
        with torch.no_grad():  # init's std shrinks the outputs: make every weight matter
            for p in model.parameters():
                if p.dim() == 1:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                else:
                    p.copy_(torch.randn_like(p) * (1.0 / p.shape[-1] ** 0.5))
            model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.mul_(4.0)
        out = os.path.join(ROOT, name)
        os.makedirs(out, exist_ok=True)
        for f in os.listdir(out):
            os.remove(os.path.join(out, f))
        shard = "60KB" if name == "relu" else "10GB"
        model.save_pretrained(out, max_shard_size=shard, safe_serialization=True)
        g = torch.Generator().manual_seed(len(name))
        for i, n in enumerate(LENGTHS):
            ids = torch.randint(0, cfg.vocab_size, (1, n), generator=g)
            with torch.no_grad():
                h = model(input_ids=ids).last_hidden_state[0]
            ref[f"{name}.ids.{i}"] = ids[0].to(torch.int32).contiguous()
            ref[f"{name}.hidden.{i}"] = h.float().contiguous()
    rel = torch.arange(-300, 301)
    for nb, md in [(32, 128), (32, 20), (16, 12)]:
        b = T5Attention._relative_position_bucket(rel, bidirectional=True, num_buckets=nb, max_distance=md)
        ref[f"buckets.{nb}.{md}"] = b.to(torch.int32).contiguous()
    save_file(ref, os.path.join(ROOT, "reference.safetensors"))
    for dp, _, fs in os.walk(ROOT):
        for f in sorted(fs):
            print(os.path.relpath(os.path.join(dp, f), ROOT), os.path.getsize(os.path.join(dp, f)))


if __name__ == "__main__":
    main()
