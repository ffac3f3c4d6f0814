#!/usr/bin/env python3
"""GGUFs of all-MiniLM-L6-v2 written by llama.cpp's own converter, for
test_embeddings' GGUF case (kvad's bert reads llama.cpp's tensor names, keys
and "bert" WordPiece vocabulary; the test skips when these files are absent).

Downloads the llama-cpp-python sdist (PyPI, pinned below; it vendors
llama.cpp with convert_hf_to_gguf.py and gguf-py), runs the converter on the
store's checkpoint ($KVAD_HOME/models/sentence-transformers/all-MiniLM-L6-v2)
and writes $KVAD_HOME/work/all-MiniLM-L6-v2-{f32,f16}.gguf.

Run with the tools venv that has torch and transformers:
  ~/.cache/kvad/torch-venv/bin/python tools/make_bert_gguf.py
"""
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST = "llama-cpp-python==0.3.36"


def main():
    home = Path(os.environ.get("KVAD_HOME") or Path.home() / ".cache" / "kvad")
    model = home / "models" / "sentence-transformers" / "all-MiniLM-L6-v2"
    out = home / "work"
    out.mkdir(parents=True, exist_ok=True)
    if not (model / "model.safetensors").exists():
        sys.exit(f"{model} is missing: run scripts/setup first")
    with tempfile.TemporaryDirectory(prefix="kvad-lcpp-") as t:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", t,
                        SDIST], check=True)
        sdist = next(Path(t).glob("*.tar.gz"))
        with tarfile.open(sdist) as tf:
            keep = [m for m in tf.getmembers()
                    if "/vendor/llama.cpp/" in m.name and
                    (m.name.endswith("/convert_hf_to_gguf.py") or "/vendor/llama.cpp/conversion/" in m.name or
                     "/vendor/llama.cpp/gguf-py/" in m.name)]
            tf.extractall(t, members=keep, filter="data")
        root = next(Path(t).glob("*/vendor/llama.cpp"))
        env = dict(os.environ, PYTHONPATH=str(root / "gguf-py"))
        for outtype in ("f32", "f16"):
            dest = out / f"all-MiniLM-L6-v2-{outtype}.gguf"
            subprocess.run([sys.executable, str(root / "convert_hf_to_gguf.py"), str(model), "--outtype", outtype,
                            "--outfile", str(dest)], check=True, env=env, cwd=root)
            print(f"wrote {dest}")


if __name__ == "__main__":
    main()
