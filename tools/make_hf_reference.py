#!/usr/bin/env python3
"""Make transformers reference fixtures for kvad's HF-checkpoint tests.

Usage:
    python3 tools/make_hf_reference.py [--cache CACHE] [--model NAME]... [--no-crosscheck]

Needs torch, transformers, accelerate (for the cross-check), gguf,
safetensors, huggingface_hub, and the checkpoints that
tools/make_hf_checkpoint.py (torch-free; scripts/setup runs it) wrote to
CACHE (default ${KVAD_HOME:-~/.cache/kvad}/hf-cache). Writes
tests/fixtures/hf_reference/NAME.json for each model (default: all of
tools/make_hf_checkpoint.py's MODELS). The tests read only the JSON; they
never need Python.

First it checks the checkpoint (unless --no-crosscheck):
  - every tensor of model.safetensors is bit-equal to the bf16 rounding of
    what transformers' own GGUF loader gives for the store's GGUF
    (AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32));
  - tokenizer.json is byte-equal to what AutoTokenizer.from_pretrained(dir,
    gguf_file=...).save_pretrained writes;
  - AutoConfig of the snapshot equals AutoConfig of the GGUF in every field
    but names, float32 spellings of eps and the unk id;
  - huggingface_hub's scan_cache_dir finds the repo with no warnings and
    try_to_load_from_cache finds every file by repo name.

Then it loads the checkpoint BY REPO NAME from CACHE (local_files_only) with
transformers: weights upcast from bf16 to float32, float32 compute,
attn_implementation="eager", 2 threads. For each prompt of
tests/fixtures/reference/NAME.json (the prompts of the llama.cpp reference
tests), tokenized by transformers' tokenizer with add_special_tokens=True
(SmolLM2: no BOS; Gemma: BOS, from tokenizer.json's post_processor), it
runs the prompt as one batch, then N_GEN greedy steps of one token each with
the KV cache (argmax of the raw logits, ties to the lower id; EOS does not
stop it). The raw ChatML prompt of SmolLM2 is replaced by chat prompts
rendered with the checkpoint's chat template (apply_chat_template,
add_generation_prompt=True); Gemma 3 270M (base) has no template, and its
turn-marker prompt is kept as text (transformers' tokenizer reads the
marker strings as their special tokens, llama.cpp's fixture did not).

The fixture (JSON; lists of numbers on one line):
  model, repo, commit        store name, HF repo id, the snapshot's commit
  made_by, versions          this script; torch/transformers/tokenizers/...
  settings                   n_gen, top_k, dtype, attn_implementation, ...
  eos_token_ids              the config's eos ids (greedy_ids may run past them)
  files                      {file: {"blob": HASH, "size": BYTES}} of the
                             snapshot (HASH = the blob's name: sha256 for LFS
                             files, git blob sha1 for the others)
  tensors                    {name: [dtype, shape, sha256 of the tensor's
                             bytes]} of model.safetensors: a test can tell
                             that setup's torch-free conversion wrote exactly
                             the bytes this reference was computed from
  crosscheck                 what the checks above found
  prompts[i]:
    kind                     "raw" (text tokenized as is) or "chat"
    text                     the prompt text (for chat: the rendered template)
    messages                 (chat only) the messages given to the template
    prompt_ids               transformers' token ids of the prompt
    llama_cpp_ids_equal      (raw only) prompt_ids == the llama.cpp fixture's
    greedy_ids               N_GEN greedy tokens
    continuation             tokenizer.decode(greedy_ids) (special tokens shown)
    margins[k]               top-1 minus top-2 logit at step k: where it is
                             small a test should stop comparing free-running
                             continuations
    first_near_tie           the first k with margins[k] < 0.5 (N_GEN if none)
    steps[k]                 top_k [id, logit] of the logits that chose
                             greedy_ids[k], by logit descending then id;
                             steps[0] is the last prompt position
Logits are float32 values written as the shortest decimal that reads back as
the same float32.
"""
import argparse
import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import struct
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_hf_checkpoint as mk  # noqa: E402
from fixture_util import dumps, top_k  # noqa: E402

N_GEN = 16
TOP_K = 10
NEAR_TIE = 0.5  # the llama.cpp reference tests' kMargin

CHATML_RAW = "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
CHATS = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "system", "content": "You are a concise assistant."},
     {"role": "user", "content": "Name the capital of Italy."}],
]


def log(msg):
    print(f"make_hf_reference: {msg}", file=sys.stderr, flush=True)


def f32(x):
    return float(str(np.float32(x)))








def tensor_hashes(path):
    """{name: [dtype, shape, sha256]} from a safetensors file, read directly."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name in sorted(k for k in header if k != "__metadata__"):
            t = header[name]
            b, e = t["data_offsets"]
            f.seek(base + b)
            out[name] = [t["dtype"], t["shape"], hashlib.sha256(f.read(e - b)).hexdigest()]
    return out


def snapshot_files(snap):
    return {f: {"blob": Path(os.readlink(snap / f)).name, "size": (snap / f).stat().st_size}
            for f in mk.FILES}


def crosscheck(name, snap, cache, repo, commit):
    """The checks of the docstring; returns what they found (and exits on a mismatch)."""
    import torch
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_file = f"{name}.gguf"
    found = {}
    with tempfile.TemporaryDirectory() as d:
        os.symlink(mk.kvad_home() / "models" / gguf_file, Path(d) / gguf_file)
        # weights
        with contextlib.redirect_stderr(io.StringIO()):
            ref = AutoModelForCausalLM.from_pretrained(d, gguf_file=gguf_file, dtype=torch.float32)
        sd = ref.state_dict()
        mine = load_file(str(snap / "model.safetensors"))
        extra = sorted(set(sd) - set(mine) - {"lm_head.weight"})
        missing = sorted(set(mine) - set(sd))
        diff = [k for k, v in mine.items()
                if sd[k].shape != v.shape or not torch.equal(sd[k].to(torch.bfloat16).view(torch.int16),
                                                             v.view(torch.int16))]
        if extra or missing or diff:
            sys.exit(f"make_hf_reference: {name}: safetensors differ from transformers' GGUF load: "
                     f"extra {extra} missing {missing} different {diff[:5]}")
        if ref.config.tie_word_embeddings is not True or "lm_head.weight" in mine:
            sys.exit(f"make_hf_reference: {name}: expected tied embeddings")
        found["tensors_equal_to_transformers_gguf_load"] = len(mine)
        del ref, sd, mine
        # tokenizer
        with contextlib.redirect_stderr(io.StringIO()):
            tok = AutoTokenizer.from_pretrained(d, gguf_file=gguf_file)
            tok.save_pretrained(Path(d) / "tok")
        if (Path(d) / "tok" / "tokenizer.json").read_bytes() != (snap / "tokenizer.json").read_bytes():
            sys.exit(f"make_hf_reference: {name}: tokenizer.json differs from transformers' GGUF conversion")
        found["tokenizer_json_equal_to_transformers_gguf_conversion"] = True
        # config
        c_gguf = AutoConfig.from_pretrained(d, gguf_file=gguf_file).to_dict()
        c_mine = AutoConfig.from_pretrained(str(snap)).to_dict()
        ignore = {"_name_or_path", "_model_name_or_path", "architectures", "dtype", "unk_token_id"}
        diffs = {k: [c_gguf.get(k), c_mine.get(k)] for k in sorted(set(c_gguf) | set(c_mine))
                 if k not in ignore and c_gguf.get(k) != c_mine.get(k)
                 and not (k == "rms_norm_eps" and f32(c_gguf[k]) == f32(c_mine[k]))}
        if diffs:
            sys.exit(f"make_hf_reference: {name}: config differs from transformers' GGUF config: {diffs}")
        found["config_equal_to_transformers_gguf_config"] = True
    # the cache, as huggingface_hub sees it
    info = scan_cache_dir(cache)
    warn = [str(w) for w in info.warnings]
    repos = {r.repo_id: r for r in info.repos}
    if warn or repo not in repos or [r.commit_hash for r in repos[repo].revisions] != [commit]:
        sys.exit(f"make_hf_reference: scan_cache_dir: {warn} {sorted(repos)}")
    for f in mk.FILES:
        p = try_to_load_from_cache(repo, f, cache_dir=cache)
        if not isinstance(p, str) or Path(p) != snap / f:
            sys.exit(f"make_hf_reference: try_to_load_from_cache({repo}, {f}) gave {p}")
    found["huggingface_hub_scan_cache_dir"] = "no warnings; refs main -> commit; every file found"
    return found


def greedy(model, ids):
    """(greedy ids, per-step top-k) with the KV cache: prompt as one batch, then one token a step."""
    import torch
    steps, out_ids = [], []
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=True)
        for _ in range(N_GEN):
            row = out.logits[0, -1].float().numpy()
            steps.append(top_k(row, TOP_K, f32))
            tok = steps[-1][0][0]
            assert tok == int(np.argmax(row))
            out_ids.append(tok)
            out = model(input_ids=torch.tensor([[tok]]), past_key_values=out.past_key_values,
                        use_cache=True)
    return out_ids, steps


def no_cache_agrees(model, ids, greedy_ids, steps):
    """Largest |logit| difference between the cached steps and one no-cache forward of the whole
    sequence, over the top-k ids of each step."""
    import torch
    with torch.no_grad():
        full = model(input_ids=torch.tensor([ids + greedy_ids[:-1]]), use_cache=False).logits[0].float().numpy()
    worst = 0.0
    for k, st in enumerate(steps):
        row = full[len(ids) - 1 + k]
        worst = max(worst, max(abs(float(row[i]) - v) for i, v in st))
    return worst


def make(name, cache, do_crosscheck):
    import tokenizers
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = mk.MODELS[name]
    repo, commit = spec["repo"], mk.commit_id(name)
    if not mk.up_to_date(cache, name, check=True):
        sys.exit(f"make_hf_reference: {repo}@{commit} is not in {cache} "
                 f"(run tools/make_hf_checkpoint.py --out {cache})")
    snap = mk.repo_folder(cache, repo) / "snapshots" / commit
    found = crosscheck(name, snap, cache, repo, commit) if do_crosscheck else {}
    for k, v in found.items():
        log(f"{name}: crosscheck {k}: {v}")

    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(repo, cache_dir=str(cache), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(repo, cache_dir=str(cache), local_files_only=True,
                                                 dtype=torch.float32, attn_implementation="eager")
    model.eval()
    raw = tokenizers.Tokenizer.from_file(str(snap / "tokenizer.json"))
    llama_fx = json.loads((ROOT / "tests" / "fixtures" / "reference" / f"{name}.json").read_text())

    jobs = []
    for p in llama_fx["prompts"]:
        if p["text"] == CHATML_RAW:
            if tok.chat_template:
                jobs += [("chat", m, None) for m in CHATS]
                continue
        jobs.append(("raw", p["text"], p["prompt_ids"]))
    if tok.chat_template and not any(kind == "chat" for kind, _, _ in jobs):
        jobs += [("chat", m, None) for m in CHATS]

    prompts = []
    for i, (kind, what, llama_ids) in enumerate(jobs):
        entry = {"kind": kind}
        if kind == "chat":
            text = tok.apply_chat_template(what, add_generation_prompt=True, tokenize=False)
            ids = tok(text, add_special_tokens=False)["input_ids"]
            entry |= {"text": text, "messages": what}
        else:
            text = what
            ids = tok(text)["input_ids"]
            entry["text"] = text
        if ids != raw.encode(text, add_special_tokens=(kind == "raw")).ids:
            sys.exit(f"make_hf_reference: {name}: transformers and tokenizers tokenize {text!r} differently")
        entry["prompt_ids"] = ids
        if llama_ids is not None:
            entry["llama_cpp_ids_equal"] = ids == llama_ids
        g, steps = greedy(model, ids)
        margins = [f32(s[0][1] - s[1][1]) for s in steps]
        entry |= {"greedy_ids": g,
                  "continuation": tok.decode(g, skip_special_tokens=False),
                  "margins": margins,
                  "first_near_tie": next((k for k, m in enumerate(margins) if m < NEAR_TIE), N_GEN),
                  "steps": steps}
        if i == 0:
            worst = no_cache_agrees(model, ids, g, steps)
            if worst > 1e-3:
                sys.exit(f"make_hf_reference: {name}: KV-cache steps differ from a no-cache forward by {worst}")
            found["kv_cache_vs_no_cache_max_abs_diff_prompt0"] = f32(worst)
        prompts.append(entry)
        log(f"{name} [{i}] {len(ids)} tokens, near-tie at {entry['first_near_tie']:2d}: "
            f"{text[:40]!r} -> {entry['continuation']!r}")

    eos = model.config.eos_token_id
    doc = {
        "model": name,
        "repo": repo,
        "commit": commit,
        "made_by": "tools/make_hf_reference.py (checkpoint: tools/make_hf_checkpoint.py)",
        "versions": {p: importlib.metadata.version(p) for p in
                     ("torch", "transformers", "tokenizers", "safetensors", "gguf", "numpy",
                      "huggingface_hub")},
        "settings": {"n_gen": N_GEN, "top_k": TOP_K, "near_tie": NEAR_TIE,
                     "weights": "bf16 (model.safetensors)", "compute_dtype": "float32",
                     "attn_implementation": "eager", "threads": 2,
                     "add_special_tokens": "raw prompts: true; chat prompts: false (the template has them)",
                     "sampling": "greedy argmax of raw logits, ties to the lower id; EOS does not stop it"},
        "n_vocab": int(model.config.vocab_size),
        "eos_token_ids": eos if isinstance(eos, list) else [eos],
        "files": snapshot_files(snap),
        "tensors": tensor_hashes(snap / "model.safetensors"),
        "crosscheck": found,
        "format": "see the docstring of tools/make_hf_reference.py and tests/fixtures/hf_reference/README.md",
        "prompts": prompts,
    }
    out = ROOT / "tests" / "fixtures" / "hf_reference" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(dumps(doc, (",", ":")) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    log(f"wrote {out} ({out.stat().st_size} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=mk.kvad_home() / "hf-cache")
    ap.add_argument("--model", action="append", choices=sorted(mk.MODELS))
    ap.add_argument("--no-crosscheck", action="store_true")
    args = ap.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    warnings.filterwarnings("ignore")
    for name in args.model or list(mk.MODELS):
        make(name, args.cache, not args.no_crosscheck)


if __name__ == "__main__":
    main()
