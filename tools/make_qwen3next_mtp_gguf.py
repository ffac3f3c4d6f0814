#!/usr/bin/env python3
"""The tiny qwen3next checkpoint with a multi-token prediction (MTP) layer,
converted by llama.cpp's own convert_hf_to_gguf.py with its MTP export on
(its default): the layout of a real Qwen3-Next GGUF, whose MTP block is the
last block inside block_count (qwen3next.nextn_predict_layers 1) with
blk.N.nextn.* beside it, for tests/model/text/test_qwen3next.cpp.

transformers builds no MTP module (Qwen3-Next's checkpoints carry mtp.* for
speculative decoding), so the MTP tensors are added to a scratch copy of
tests/fixtures/hf_tiny/qwen3next under HF's names: mtp.layers.0.* a copy of
layer 5 (gated attention + MoE), mtp.fc.weight [n_embd, 2·n_embd] random,
mtp.{pre_fc_norm_embedding, pre_fc_norm_hidden, norm}.weight zero-centred
norms (zeros). The decoder's tensors are the fixture's, so transformers'
logits.json and llama.cpp's llama.cpp-f32.logits.json still apply; llama.cpp's
logits on the new file are written too (llama.cpp-mtp-f32.logits.json).

    ~/.cache/kvad/torch-venv/bin/python tools/make_qwen3next_mtp_gguf.py \\
        /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp

writes tests/fixtures/hf_tiny/qwen3next/llama.cpp-mtp-f32.gguf (and the
logits when llama_cpp imports: PYTHONPATH=<sdist> LLAMA_CPP_LIB_PATH=<bin>).
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "hf_tiny" / "qwen3next"


def main():
    llama_cpp = Path(sys.argv[1])
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import convert_tiny_gguf

    tensors = load_file(FIXTURE / "model.safetensors")
    n_embd = json.loads((FIXTURE / "config.json").read_text())["hidden_size"]
    g = torch.Generator().manual_seed(31)
    for name in list(tensors):
        if name.startswith("model.layers.5."):
            tensors["mtp.layers.0." + name[len("model.layers.5."):]] = tensors[name].clone()
    tensors["mtp.fc.weight"] = torch.randn(n_embd, 2 * n_embd, generator=g) * 0.1
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        tensors[f"mtp.{n}.weight"] = torch.zeros(n_embd)
    with tempfile.TemporaryDirectory() as tmp:
        # convert_tiny_gguf converts OUT / NAME, with --no-mtp when NAME
        # starts with qwen3next: a scratch NAME that does not keeps the export on.
        d = Path(tmp) / "tiny_with_mtp"
        d.mkdir()
        shutil.copy(FIXTURE / "config.json", d / "config.json")
        shutil.copy(FIXTURE / "logits.json", d / "logits.json")
        save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
        convert_tiny_gguf.OUT = Path(tmp)
        sys.argv = ["convert_tiny_gguf.py", str(llama_cpp), d.name]
        convert_tiny_gguf.main()
        shutil.copy(d / "llama.cpp-f32.gguf", FIXTURE / "llama.cpp-mtp-f32.gguf")
        if (d / "llama.cpp-f32.logits.json").exists():
            shutil.copy(d / "llama.cpp-f32.logits.json", FIXTURE / "llama.cpp-mtp-f32.logits.json")
    print("wrote", FIXTURE / "llama.cpp-mtp-f32.gguf", (FIXTURE / "llama.cpp-mtp-f32.gguf").stat().st_size, "bytes")


if __name__ == "__main__":
    main()
