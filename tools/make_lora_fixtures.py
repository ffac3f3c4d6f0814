#!/usr/bin/env python3
"""Small random PEFT LoRA adapters for the tiny HF checkpoints, and the
logits transformers + peft give with them.

For each base in tests/fixtures/hf_tiny/{llama, qwen2, gemma3, qwen3moe}
(tools/make_tiny_hf.py), makes two adapters with peft's own LoraConfig /
get_peft_model and saves them with peft's save_pretrained
(adapter_config.json + adapter_model.safetensors):

    a: r = 4, lora_alpha = 8, every attention and MLP projection (attention
       only on qwen3moe, whose experts are not separate Linear modules)
    b: r = 2, lora_alpha = 4, use_rslora (scale alpha / sqrt(r)),
       q_proj, v_proj, o_proj

lora_A and lora_B are drawn at random (peft's default init makes B zero,
which would make the adapter a no-op). Writes, under
tests/fixtures/lora/<base>/:

    a/, b/                      the PEFT adapter folders
    logits-a.json               peft with a at strength 1
    logits-a0.5-b1.5.json       a and b active together, a's scaling × 0.5,
                                b's × 1.5 (peft LoraLayer.scaling)
    a.gguf                      llama.cpp's convert_lora_to_gguf.py of a
                                (--outtype f32), when CONVERT_LORA names it

and under tests/fixtures/lora/bad/ adapters that must be refused: a lora_B
with a row too many (shape), lora_A and lora_B of different ranks, a module
name no architecture has, an adapter_config.json whose r disagrees.

Logits: {"tokens": [...], "logits": [[n_vocab floats] per position]} on
make_tiny_hf.py's TOKENS, as logits.json there. Needs torch, transformers,
peft (a venv for tools/, never the tests); for a.gguf also llama.cpp's
convert_lora_to_gguf.py (vendor/llama.cpp in the llama-cpp-python sdist)
and the gguf package:

    CONVERT_LORA=/path/to/convert_lora_to_gguf.py \
        /work/wt/venv-pictures/bin/python tools/make_lora_fixtures.py
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
BASES = ROOT / "tests" / "fixtures" / "hf_tiny"
OUT = ROOT / "tests" / "fixtures" / "lora"
TOKENS = [1, 17, 42, 7, 99, 3, 64, 120, 5, 88, 31, 2, 77, 14]
ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP = ["gate_proj", "up_proj", "down_proj"]


def base(name):
    return transformers.AutoModelForCausalLM.from_pretrained(BASES / name, dtype=torch.float32).eval()


def randomise(model, seed, std=0.2):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_A" in n or "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def logits(model):
    with torch.no_grad():
        out = model(torch.tensor([TOKENS])).logits[0].float()
    return {"tokens": TOKENS, "logits": [[round(float(v), 6) for v in row] for row in out]}


def make(name):
    d = OUT / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    targets = ATTN if name == "qwen3moe" else ATTN + MLP
    cfg_a = LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0)
    cfg_b = LoraConfig(r=2, lora_alpha=4, use_rslora=True, target_modules=["q_proj", "v_proj", "o_proj"],
                       lora_dropout=0.0)
    # Adapter a alone.
    m = get_peft_model(base(name), cfg_a, adapter_name="a")
    randomise(m, 1)
    m.save_pretrained(d)  # the default adapter's folder is d itself; a non-default one goes to d/<name>
    m.eval()
    (d / "logits-a.json").write_text(json.dumps(logits(m)))
    # Adapter b, saved, then both active with strengths.
    mb = get_peft_model(base(name), cfg_b, adapter_name="b")
    randomise(mb, 2)
    mb.save_pretrained(d)
    both = PeftModel.from_pretrained(base(name), d / "a", adapter_name="a")
    both.load_adapter(d / "b", adapter_name="b")
    both.base_model.set_adapter(["a", "b"])
    for mod in both.modules():
        if isinstance(mod, LoraLayer):
            if "a" in mod.scaling:
                mod.scaling["a"] *= 0.5
            if "b" in mod.scaling:
                mod.scaling["b"] *= 1.5
    both.eval()
    (d / "logits-a0.5-b1.5.json").write_text(json.dumps(logits(both)))
    for sub in ("a", "b"):
        (d / sub / "README.md").unlink(missing_ok=True)
        cfg = json.loads((d / sub / "adapter_config.json").read_text())
        cfg["base_model_name_or_path"] = f"tests/fixtures/hf_tiny/{name}"
        (d / sub / "adapter_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    (d / "README.md").unlink(missing_ok=True)
    conv = os.environ.get("CONVERT_LORA")
    if conv:
        subprocess.run([sys.executable, conv, "--base", str(BASES / name), "--outtype", "f32", "--outfile",
                        str(d / "a.gguf"), str(d / "a")], check=True)


def make_bad():
    """Copies of llama's adapter a, each broken one way."""
    src = OUT / "llama" / "a"
    d = OUT / "bad"
    if d.exists():
        shutil.rmtree(d)
    t = load_file(src / "adapter_model.safetensors")
    cfg = json.loads((src / "adapter_config.json").read_text())
    key = "base_model.model.model.layers.0.self_attn.q_proj."

    def write(sub, tensors, config=cfg):
        (d / sub).mkdir(parents=True)
        save_file(tensors, d / sub / "adapter_model.safetensors")
        (d / sub / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True))

    shape = dict(t)
    b = shape[key + "lora_B.weight"]
    shape[key + "lora_B.weight"] = torch.cat([b, b[:1]], 0)  # one row more than q_proj has
    write("shape", shape)
    rank = dict(t)
    rank[key + "lora_B.weight"] = rank[key + "lora_B.weight"][:, :3].contiguous()  # rank 3 against A's 4
    write("rank", rank)
    unknown = dict(t)
    unknown["base_model.model.model.layers.0.self_attn.qq_proj.lora_A.weight"] = unknown.pop(key + "lora_A.weight")
    unknown["base_model.model.model.layers.0.self_attn.qq_proj.lora_B.weight"] = unknown.pop(key + "lora_B.weight")
    write("unknown", unknown)
    write("config_r", dict(t), {**cfg, "r": 8})
    (d / "no_config").mkdir()
    shutil.copy(src / "adapter_model.safetensors", d / "no_config" / "adapter_model.safetensors")


def main():
    torch.manual_seed(0)
    for name in ("llama", "qwen2", "gemma3", "qwen3moe"):
        make(name)
    make_bad()


if __name__ == "__main__":
    main()
