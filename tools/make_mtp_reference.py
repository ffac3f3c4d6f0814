#!/usr/bin/env python3
"""Reference logits of the multi-token prediction (MTP) layers of DeepSeek V3
and Qwen3-Next, from transformers' own modules, for
tests/model/text/test_mtp.cpp.

transformers runs neither MTP layer (it drops DeepSeek V3's
model.layers.{num_hidden_layers}.* and Qwen3-Next's mtp.* on load), so the
step is assembled here from its modules and the equations of the DeepSeek-V3
Technical Report section 2.2 (as vLLM's deepseek_mtp.py / qwen3_next_mtp.py
run them):

    h_i   = the main model's last decoder layer output at position i (before
            its final norm; a forward hook on model.layers[-1])
    x_i   = eh_proj [enorm(emb(t_{i+1})) ; hnorm(h_i)]     (Qwen3-Next: mtp.fc,
            pre_fc_norm_embedding, pre_fc_norm_hidden)
    y     = one decoder layer over x_0 .. x_i (causal, rope position i)
    logits_i = head(norm(y_i))  for token t_{i+2}          (DeepSeek:
            shared_head.norm / shared_head.head; Qwen3-Next: mtp.norm, lm_head)

The decoder layer runs inside a one-layer DeepseekV3Model / Qwen3NextModel
(first_k_dense_replace 0, layer_types [full_attention]) fed x as
inputs_embeds, so that its attention mask, rope and MoE are transformers'.
A chained step follows the last position: x_{T-1} from the argmax guess and
the layer's own state (DeepSeek: y before the norm; Qwen3-Next: after it), as
vLLM chains num_speculative_tokens > 1.

DeepSeek V3: the tiny tests/fixtures/hf_tiny/deepseek_v3 model plus a random
MTP layer, written as an HF checkpoint with the MTP layer at
model.layers.3.* (DeepSeek-V3's own layout) to
tests/fixtures/hf_tiny/deepseek_v3_mtp/ (config.json, model.safetensors, a
128-symbol byte-level tokenizer.json, mtp_logits.json).
Qwen3-Next: tests/fixtures/hf_tiny/qwen3next/llama.cpp-mtp-f32.gguf's MTP
weights, rebuilt as tools/make_qwen3next_mtp_gguf.py made them (seed 31), to
tests/fixtures/hf_tiny/qwen3next/mtp_logits.json, and the same tensors under
HF's mtp.* names to tests/fixtures/hf_tiny/qwen3next/mtp.safetensors (the
test puts it beside model.safetensors as a second shard).

    /work/wt/venv-pictures/bin/python tools/make_mtp_reference.py
"""
import copy
import json
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "hf_tiny"


def last_layer_output(model, layer, run):
    """What `layer` returns during run() (a tensor, or the first of a tuple)."""
    got = {}

    def hook(_m, _in, out):
        got["h"] = (out[0] if isinstance(out, tuple) else out).detach().clone()

    handle = layer.register_forward_hook(hook)
    try:
        result = run()
    finally:
        handle.remove()
    return got["h"][0], result


def mtp_steps(tokens, h, embed, enorm, hnorm, eh_proj, block_model, head, chain_post_norm):
    """Logits of every MTP position 0..T-2 and of one chained step after them."""
    T = len(tokens)
    ids = torch.tensor(tokens[1:])

    def inputs(emb_ids, hid):
        return eh_proj(torch.cat([enorm(embed(emb_ids)), hnorm(hid)], dim=-1))

    def run(x):
        layer = block_model.layers[0]
        pre, out = last_layer_output(block_model, layer, lambda: block_model(inputs_embeds=x[None], use_cache=False))
        post = out.last_hidden_state[0]
        return pre, post, head(post)

    with torch.no_grad():
        x = inputs(ids, h[: T - 1])
        pre, post, logits = run(x)
        guess = int(torch.argmax(logits[-1]))
        state = (post if chain_post_norm else pre)[-1]
        x2 = torch.cat([x, inputs(torch.tensor([guess]), state[None])])
        _, _, logits2 = run(x2)
        # The rows before are unchanged by the appended one (causal).
        assert torch.allclose(logits2[:-1], logits, atol=1e-5)
    return logits, guess, logits2[-1]


def write(path, tokens, logits, guess, chained):
    rows = [[float(v) for v in r] for r in logits]
    path.write_text(json.dumps({"tokens": tokens, "mtp_logits": rows, "chain_guess": guess,
                                "chained_logits": [float(v) for v in chained]}))
    print("wrote", path, path.stat().st_size, "bytes")


def byte_tokenizer_json():
    """A byte-level BPE of 128 single symbols (GPT-2's byte map), no merges."""
    vocab = {}
    for c in range(128):
        cp = c if 33 <= c <= 126 else 0x100 + (c if c < 33 else c - 94)
        vocab[chr(cp)] = c
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": bl, "post_processor": None,
            "decoder": bl, "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                                     "ignore_merges": False, "vocab": vocab, "merges": []}}


def unfused_experts(sd):
    """transformers' fused experts (gate_up_proj [n, 2F, E], gate rows
    first; down_proj [n, E, F]) under the per-expert names checkpoints use."""
    out = {}
    for n, t in sd.items():
        if n.endswith("experts.gate_up_proj"):
            F = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[n[: -len("gate_up_proj")] + f"{e}.gate_proj.weight"] = t[e, :F]
                out[n[: -len("gate_up_proj")] + f"{e}.up_proj.weight"] = t[e, F:]
        elif n.endswith("experts.down_proj"):
            for e in range(t.shape[0]):
                out[n[: -len("down_proj")] + f"{e}.down_proj.weight"] = t[e]
        else:
            out[n] = t
    return out


def deepseek_v3():
    src = FIX / "deepseek_v3"
    main = transformers.DeepseekV3ForCausalLM.from_pretrained(src, dtype=torch.float32,
                                                             attn_implementation="eager").eval()
    cfg = main.config
    tokens = json.loads((src / "logits.json").read_text())["tokens"]
    torch.manual_seed(41)
    c1 = copy.deepcopy(cfg)
    c1.num_hidden_layers = 1
    c1.first_k_dense_replace = 0  # the MTP layer (index 3) is sparse, as in DeepSeek-V3
    block = transformers.DeepseekV3ForCausalLM(c1).eval()
    E, V = cfg.hidden_size, cfg.vocab_size
    with torch.no_grad():
        for n, p in block.named_parameters():  # as make_tiny_hf.py's deepseek(): routers, norms, MLA sharpened
            if n.endswith("mlp.gate.weight"):
                p.normal_(0.0, 2.0)
            elif "layernorm" in n or n.endswith("norm.weight"):
                p.normal_(1.0, 0.3)
            elif n.endswith(("q_b_proj.weight", "kv_a_proj_with_mqa.weight")):
                p.mul_(4.0)
        for n, b in block.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.normal_(0.0, 0.3)
        enorm = transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3RMSNorm(E, cfg.rms_norm_eps)
        hnorm = transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3RMSNorm(E, cfg.rms_norm_eps)
        enorm.weight.normal_(1.0, 0.3)
        hnorm.weight.normal_(1.0, 0.3)
        eh_proj = torch.nn.Linear(2 * E, E, bias=False)
        eh_proj.weight.normal_(0.0, 0.15)
        block.lm_head.weight.normal_(0.0, 0.5)
    with torch.no_grad():
        h, _ = last_layer_output(main, main.model.layers[-1], lambda: main(torch.tensor([tokens])))
        logits, guess, chained = mtp_steps(tokens, h, main.model.embed_tokens, enorm, hnorm, eh_proj, block.model,
                                           block.lm_head, chain_post_norm=False)
    out = FIX / "deepseek_v3_mtp"
    out.mkdir(exist_ok=True)
    cfg_json = json.loads((src / "config.json").read_text())
    assert cfg_json["num_nextn_predict_layers"] == 1
    (out / "config.json").write_text(json.dumps(cfg_json, indent=2) + "\n")
    tensors = dict(load_file(src / "model.safetensors"))
    for n, t in unfused_experts(main.model.layers[1].state_dict()).items():  # the unfusing is the file's naming
        assert torch.equal(t, tensors["model.layers.1." + n]), n
    L = f"model.layers.{cfg.num_hidden_layers}."
    for n, t in unfused_experts(block.model.layers[0].state_dict()).items():
        tensors[L + n] = t.clone().contiguous()
    tensors[L + "eh_proj.weight"] = eh_proj.weight.detach().clone()
    tensors[L + "enorm.weight"] = enorm.weight.detach().clone()
    tensors[L + "hnorm.weight"] = hnorm.weight.detach().clone()
    tensors[L + "shared_head.norm.weight"] = block.model.norm.weight.detach().clone()
    tensors[L + "shared_head.head.weight"] = block.lm_head.weight.detach().clone()
    tensors[L + "embed_tokens.weight"] = main.model.embed_tokens.weight.detach().clone()
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    (out / "tokenizer.json").write_text(json.dumps(byte_tokenizer_json()))
    write(out / "mtp_logits.json", tokens, logits, guess, chained)


def qwen3next():
    src = FIX / "qwen3next"
    main = transformers.Qwen3NextForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    cfg = main.config
    tokens = json.loads((src / "logits.json").read_text())["tokens"][:24]
    E = cfg.hidden_size
    # tools/make_qwen3next_mtp_gguf.py's MTP weights: layer 5's copy, a
    # random fc (seed 31, drawn first), zero-centred norms of zeros.
    g = torch.Generator().manual_seed(31)
    fc = torch.nn.Linear(2 * E, E, bias=False)
    with torch.no_grad():
        fc.weight.copy_(torch.randn(E, 2 * E, generator=g) * 0.1)
    c1 = copy.deepcopy(cfg)
    c1.num_hidden_layers = 1
    c1.layer_types = ["full_attention"]
    block = transformers.Qwen3NextModel(c1).eval()
    block.layers[0].load_state_dict(main.model.layers[5].state_dict())
    Norm = transformers.models.qwen3_next.modeling_qwen3_next.Qwen3NextRMSNorm
    enorm, hnorm = Norm(E, cfg.rms_norm_eps), Norm(E, cfg.rms_norm_eps)
    with torch.no_grad():
        for n in (enorm, hnorm, block.norm):
            n.weight.zero_()
        h, _ = last_layer_output(main, main.model.layers[-1], lambda: main(torch.tensor([tokens])))
        logits, guess, chained = mtp_steps(tokens, h, main.model.embed_tokens, enorm, hnorm, fc, block,
                                           main.lm_head, chain_post_norm=True)
    write(src / "mtp_logits.json", tokens, logits, guess, chained)
    # The same MTP tensors under HF's names (mtp.*), alone: a second shard
    # beside the fixture's model.safetensors makes the HF checkpoint with MTP.
    sd = load_file(src / "model.safetensors")
    mtp = {"mtp.layers.0." + n[len("model.layers.5."):]: t.clone() for n, t in sd.items()
           if n.startswith("model.layers.5.")}
    mtp["mtp.fc.weight"] = fc.weight.detach().clone()
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        mtp[f"mtp.{n}.weight"] = torch.zeros(E)
    save_file(mtp, src / "mtp.safetensors", metadata={"format": "pt"})
    print("wrote", src / "mtp.safetensors", (src / "mtp.safetensors").stat().st_size, "bytes")


if __name__ == "__main__":
    deepseek_v3()
    qwen3next()
