#!/usr/bin/env python3
"""Turn the kvad store's GGUF models into HuggingFace checkpoints in a HF hub cache.

Usage:
    python3 tools/make_hf_checkpoint.py [--out CACHE] [--model NAME]... [--force] [--check]

CACHE defaults to ${KVAD_HOME:-~/.cache/kvad}/hf-cache. NAME is a model of
scripts/models.tsv that this script knows (MODELS below; default: all of them),
read from ${KVAD_HOME:-~/.cache/kvad}/models/NAME.gguf (scripts/setup puts it
there) and checked against the sha256 in scripts/models.tsv.

Needs NO torch, so that scripts/setup can run it on a fresh machine: only the
PyPI packages gguf (llama.cpp's gguf-py: it reads the file and dequantizes,
gguf.quants.dequantize), numpy, safetensors (its torch-free serialize_file,
the writer that safetensors.torch.save_file uses), transformers and tokenizers
(transformers' GGUF tokenizer conversion, convert_gguf_tokenizer, which is
torch-free; its AutoTokenizer(gguf_file=...) entry point is not, since it
reads the config through a torch module).

What it writes, for each model, is what transformers' own GGUF loader
(AutoModelForCausalLM / AutoTokenizer .from_pretrained(dir, gguf_file=...))
makes of the file, saved the way the Hub repository stores it
(tools/make_hf_reference.py checks the two against each other, with torch):

  model.safetensors   every tensor in bf16 (round to nearest even from the
                      float32 that gguf-py dequantizes), named as HF names
                      it, [out, in] for linear weights (a GGUF tensor of
                      ne = [in, out] is the same row-major bytes). metadata
                      {"format": "pt"}, like save_pretrained. Tied embeddings:
                      no lm_head.weight (the GGUFs have no output.weight).
                      llama: attn_q / attn_k rows un-permuted (llama.cpp's
                      converter permutes them for adjacent-pair RoPE; HF's
                      rotate_half pairs i with i + head_dim/2), as
                      transformers' LlamaTensorProcessor does.
                      gemma3: every norm weight minus 1 (llama.cpp stores
                      1 + w; HF stores w and scales by 1 + w), as
                      transformers' Gemma2TensorProcessor does.
  config.json         the hyper-parameters under their HF names, in the form
                      of the Hub repositories' files (rope_theta,
                      rope_scaling, torch_dtype, ...; transformers 5 still
                      reads it and turns it into its rope_parameters).
  generation_config.json  what GenerationConfig.from_model_config writes:
                      bos/eos/pad ids.
  tokenizer.json      transformers' GGUF tokenizer conversion
                      (convert_gguf_tokenizer, then TokenizersBackend with
                      the GGUF's add_bos_token, which sets the BOS
                      post_processor), written by save_pretrained.
  tokenizer_config.json  tokenizer_class, bos/eos/unk/pad tokens,
                      add_bos_token / add_eos_token (from the GGUF),
                      added_tokens_decoder, model_max_length and, where the
                      GGUF has one, chat_template.

The cache is huggingface_hub's layout, so huggingface_hub, transformers and
kvad find the models by name:

  CACHE/models--ORG--NAME/refs/main            the commit id (40 hex, no newline)
  CACHE/models--ORG--NAME/snapshots/COMMIT/F   -> ../../blobs/HASH (relative symlink)
  CACHE/models--ORG--NAME/blobs/HASH           the file's bytes

HASH is what the Hub's etag is: the sha256 of the file for an LFS file
(*.safetensors, and any file over 10 MiB, like Gemma's tokenizer.json), else
the git blob sha1 (sha1 of "blob SIZE\\0" + bytes). COMMIT is a fixed fake
commit id: sha1("kvad-hf-checkpoint FORMAT_VERSION REPO GGUF_SHA256"), so it
changes when the source file or this script's output format does, and a
cache keyed by commit (kvad's quantize-once cache) sees a new checkpoint.

Idempotent: a model whose refs/main already names COMMIT and whose snapshot
files all exist is skipped (--check also re-hashes the blobs; --force
rebuilds). The script owns the models--ORG--NAME folders it writes in CACHE:
on a rebuild it removes their other snapshots and unreferenced blobs. The
output is deterministic: the same GGUF and package versions give the same
bytes (tests/fixtures/hf_reference/NAME.json records their sha256s).
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from fixture_util import expected_sha256, kvad_home, sha256_file

ROOT = Path(__file__).resolve().parent.parent

# Bump when the bytes this script writes change for the same GGUF: it is part
# of the commit id.
FORMAT_VERSION = 1

MODELS = {
    "smollm2-135m": {"repo": "HuggingFaceTB/SmolLM2-135M-Instruct", "arch": "llama",
                     "tokenizer_class": "GPT2Tokenizer"},
    "gemma3-270m": {"repo": "google/gemma-3-270m", "arch": "gemma3",
                    "tokenizer_class": "GemmaTokenizer"},
}

FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
         "model.safetensors")

LFS_THRESHOLD = 10 * 1024 * 1024  # the Hub stores files over 10 MiB in LFS


def log(msg):
    print(f"make_hf_checkpoint: {msg}", file=sys.stderr, flush=True)








def commit_id(name):
    """The fake commit of NAME's checkpoint: fixed by the source GGUF and FORMAT_VERSION."""
    text = f"kvad-hf-checkpoint {FORMAT_VERSION} {MODELS[name]['repo']} {expected_sha256(name, 'make_hf_checkpoint')}"
    return hashlib.sha1(text.encode()).hexdigest()


def repo_folder(cache, repo):
    return Path(cache) / ("models--" + repo.replace("/", "--"))


def blob_name(path):
    """The Hub etag of a file: sha256 for LFS files, git blob sha1 otherwise."""
    size = path.stat().st_size
    if path.name.endswith(".safetensors") or size > LFS_THRESHOLD:
        return sha256_file(path)
    h = hashlib.sha1(b"blob %d\0" % size)
    h.update(path.read_bytes())
    return h.hexdigest()


# ---------------------------------------------------------------- GGUF metadata

def read_metadata(reader):
    """{key: value} of a GGUF's metadata: strings decoded, arrays as lists."""
    md = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        md[key] = field.contents()
    return md


def f32(x):
    """A float32 metadata value as the shortest decimal that is the same float32
    (1e-05, not 9.999999747378752e-06): what the Hub's config.json has."""
    return float(str(np.float32(x)))


# ---------------------------------------------------------------- tensors

def to_bf16(a):
    """float32 array -> uint16 bf16 bits, rounding to nearest even (torch's .to(bfloat16))."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        raise ValueError("non-finite weight")
    u = a.view(np.uint32)
    return ((u + (((u >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)


def unpermute(w, n_head):
    """Undo llama.cpp's Q/K row permutation (convert_hf_to_gguf.py LlamaModel.permute):
    rows of each head go back from interleaved pairs to two halves (rotate_half)."""
    rows = w.shape[0]
    half = rows // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LAYER_NAMES = {
    "llama": {
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    },
    "gemma3": {
        "attn_norm": "input_layernorm",
        "post_attention_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
        "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
        "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    },
}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def hf_name(arch, gguf_name):
    parts = gguf_name.split(".")
    if parts[-1] != "weight":
        raise ValueError(f"unexpected tensor {gguf_name}")
    if parts[0] == "blk" and len(parts) == 4 and parts[2] in LAYER_NAMES[arch]:
        return f"model.layers.{int(parts[1])}.{LAYER_NAMES[arch][parts[2]]}.weight"
    if len(parts) == 2 and parts[0] in GLOBAL_NAMES:
        return f"{GLOBAL_NAMES[parts[0]]}.weight"
    raise ValueError(f"no HF name for GGUF tensor {gguf_name} ({arch})")


def convert_tensors(reader, arch, cfg):
    """{hf_name: bf16 uint16 array of the HF shape} for every tensor of the file."""
    from gguf import quants
    out = {}
    for t in reader.tensors:
        name = hf_name(arch, t.name)
        w = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        shape = tuple(int(n) for n in reversed(t.shape))  # ne = [in, out] -> [out, in]
        w = w.reshape(shape)
        leaf = t.name.split(".")[-2]
        if arch == "llama" and leaf == "attn_q":
            w = unpermute(w, cfg["num_attention_heads"])
        elif arch == "llama" and leaf == "attn_k":
            w = unpermute(w, cfg["num_key_value_heads"])
        elif arch == "gemma3" and leaf.endswith("norm"):
            w = w - np.float32(1)
        if name in out:
            raise ValueError(f"two GGUF tensors map to {name}")
        out[name] = to_bf16(w)
    return out


def write_safetensors(tensors, path):
    import safetensors
    specs = {name: safetensors.TensorSpec(dtype="bfloat16", shape=a.shape, data_ptr=a.ctypes.data,
                                          data_len=a.nbytes)
             for name, a in tensors.items()}
    safetensors.serialize_file(specs, str(path), metadata={"format": "pt"})


# ---------------------------------------------------------------- config

def llama_config(md, n_vocab, tied, version):
    a = "llama"
    n_embd, n_head = md[f"{a}.embedding_length"], md[f"{a}.attention.head_count"]
    head_dim = md.get(f"{a}.attention.key_length", n_embd // n_head)
    if md.get(f"{a}.rope.dimension_count", head_dim) != head_dim:
        raise ValueError("partial rotary (rope.dimension_count != head_dim) is not handled")
    if any(k.startswith(f"{a}.rope.scaling") for k in md):
        raise ValueError("rope scaling is not handled")
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": md.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": md.get("tokenizer.ggml.eos_token_id"),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": n_embd,
        "initializer_range": 0.02,
        "intermediate_size": md[f"{a}.feed_forward_length"],
        "max_position_embeddings": md[f"{a}.context_length"],
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": n_head,
        "num_hidden_layers": md[f"{a}.block_count"],
        "num_key_value_heads": md.get(f"{a}.attention.head_count_kv", n_head),
        "pad_token_id": md.get("tokenizer.ggml.padding_token_id"),
        "pretraining_tp": 1,
        "rms_norm_eps": f32(md[f"{a}.attention.layer_norm_rms_epsilon"]),
        "rope_scaling": None,
        "rope_theta": f32(md.get(f"{a}.rope.freq_base", 10000.0)),
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        "transformers_version": version,
        "use_cache": True,
        "vocab_size": md.get(f"{a}.vocab_size", n_vocab),
    }


def gemma3_config(md, n_vocab, tied, version):
    a = "gemma3"
    n_layer = md[f"{a}.block_count"]
    head_dim = md[f"{a}.attention.key_length"]
    if md.get(f"{a}.attention.value_length", head_dim) != head_dim:
        raise ValueError("key_length != value_length")
    if any(k.startswith(f"{a}.rope.scaling") for k in md):
        raise ValueError("rope scaling is not handled")
    # llama.cpp (llama-model.cpp, LLM_ARCH_GEMMA3) fixes what the GGUF does not
    # say: every 6th layer global, the others sliding; 10000 as the local
    # layers' RoPE base; queries scaled by 1/sqrt(head_dim) for this size.
    pattern = 6
    return {
        "_sliding_window_pattern": pattern,
        "architectures": ["Gemma3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": None,
        "bos_token_id": md.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": md.get("tokenizer.ggml.eos_token_id"),
        "final_logit_softcapping": None,
        "head_dim": head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": md[f"{a}.embedding_length"],
        "initializer_range": 0.02,
        "intermediate_size": md[f"{a}.feed_forward_length"],
        "layer_types": ["sliding_attention" if (i + 1) % pattern else "full_attention"
                        for i in range(n_layer)],
        "max_position_embeddings": md[f"{a}.context_length"],
        "model_type": "gemma3_text",
        "num_attention_heads": md[f"{a}.attention.head_count"],
        "num_hidden_layers": n_layer,
        "num_key_value_heads": md[f"{a}.attention.head_count_kv"],
        "pad_token_id": md.get("tokenizer.ggml.padding_token_id"),
        "query_pre_attn_scalar": head_dim,
        "rms_norm_eps": f32(md[f"{a}.attention.layer_norm_rms_epsilon"]),
        "rope_local_base_freq": 10000.0,
        "rope_scaling": None,
        "rope_theta": f32(md[f"{a}.rope.freq_base"]),
        "sliding_window": md[f"{a}.attention.sliding_window"],
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        "transformers_version": version,
        "use_bidirectional_attention": False,
        "use_cache": True,
        "vocab_size": n_vocab,
    }


CONFIGS = {"llama": llama_config, "gemma3": gemma3_config}


def generation_config(cfg):
    return {"_from_model_config": True, "bos_token_id": cfg["bos_token_id"],
            "eos_token_id": cfg["eos_token_id"], "pad_token_id": cfg["pad_token_id"],
            "transformers_version": cfg["transformers_version"]}


# ---------------------------------------------------------------- tokenizer

def gguf_tokenizer_dict(md):
    """(architecture, tokenizer_dict, tokenizer_config) as transformers'
    get_gguf_tokenizer builds them, from gguf-py's metadata instead of
    transformers' reader (which imports torch)."""
    from transformers.integrations.gguf import gguf_tokenizer_mapping as m
    arch = md["general.architecture"]
    grouped = {group: {name: md[f"tokenizer.{key}"] for key, name in renames.items()
                       if f"tokenizer.{key}" in md}
               for group, renames in m.GGUF_TOKENIZER_MAPPING.items()}
    tok, tok_cfg = grouped["tokenizer"], grouped["tokenizer_config"]
    if tok.get("tokenizer_type") == "llama":
        tok_cfg.setdefault("add_bos_token", True)
    for name, key in m._SPECIAL_TOKENS.items():
        token_id = md.get(f"tokenizer.ggml.{key}")
        tok_cfg[name] = tok["tokens"][token_id] if token_id is not None else None
    return arch, tok, tok_cfg


def make_tokenizer(md, tokenizer_class, model_max_length, out_dir):
    """Writes tokenizer.json and tokenizer_config.json to out_dir."""
    from transformers.integrations.gguf import gguf_tokenizer_mapping as m
    from transformers.tokenization_utils_tokenizers import TokenizersBackend
    arch, tok_dict, tok_cfg = gguf_tokenizer_dict(md)
    backend, _ = m.convert_gguf_tokenizer(arch, tok_dict)
    # What TokenizersBackend.__init__ does with the converted backend when it
    # reads a GGUF (it sets the BOS/EOS post_processor from add_bos_token /
    # add_eos_token), then save_pretrained's tokenizer.json.
    tok = TokenizersBackend(tokenizer_object=backend, **tok_cfg)
    tmp = out_dir / "tokenizer"
    tok.save_pretrained(str(tmp))
    os.replace(tmp / "tokenizer.json", out_dir / "tokenizer.json")
    shutil.rmtree(tmp)  # its v5-style tokenizer_config.json and chat_template.jinja: written below instead
    saved = json.loads((out_dir / "tokenizer.json").read_text(encoding="utf-8"))
    added = {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                               "single_word", "special")}
             for t in saved["added_tokens"]}
    cfg = {"add_bos_token": bool(tok_cfg.get("add_bos_token", False)),
           "add_eos_token": bool(tok_cfg.get("add_eos_token", False)),
           "added_tokens_decoder": added}
    for k in ("bos_token", "eos_token", "pad_token", "unk_token"):
        if tok_cfg.get(k) is not None:
            cfg[k] = tok_cfg[k]
    if tok_cfg.get("chat_template"):
        cfg["chat_template"] = tok_cfg["chat_template"]
    cfg["clean_up_tokenization_spaces"] = False
    cfg["model_max_length"] = model_max_length
    cfg["tokenizer_class"] = tokenizer_class
    write_json(out_dir / "tokenizer_config.json", cfg)
    return len(tok_dict["tokens"])


def write_json(path, obj):
    # save_pretrained's form: indent 2, sorted keys, a final newline.
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                    encoding="utf-8")


# ---------------------------------------------------------------- the cache

def up_to_date(cache, name, check):
    folder = repo_folder(cache, MODELS[name]["repo"])
    commit = commit_id(name)
    try:
        if (folder / "refs" / "main").read_text() != commit:
            return False
    except OSError:
        return False
    snap = folder / "snapshots" / commit
    for f in FILES:
        p = snap / f
        if not p.is_symlink() or not p.exists():
            return False
        if check and blob_name(p.resolve()) != Path(os.readlink(p)).name:
            log(f"{name}: {f}: blob does not match its name")
            return False
    return True


def build(cache, name, gguf_path):
    import gguf
    import transformers
    spec = MODELS[name]
    want = expected_sha256(name, "make_hf_checkpoint")
    t0 = time.time()
    got = sha256_file(gguf_path)
    if got != want:
        sys.exit(f"make_hf_checkpoint: {gguf_path}: sha256 {got} is not the one in scripts/models.tsv")
    folder = repo_folder(cache, spec["repo"])
    commit = commit_id(name)
    blobs, snap = folder / "blobs", folder / "snapshots" / commit
    work = blobs / f".kvad-{commit}.incomplete"  # huggingface_hub's own suffix for partial blobs
    for d in (blobs, snap, folder / "refs"):
        d.mkdir(parents=True, exist_ok=True)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()

    reader = gguf.GGUFReader(str(gguf_path))
    md = read_metadata(reader)
    if md["general.architecture"] != spec["arch"]:
        sys.exit(f"make_hf_checkpoint: {gguf_path}: architecture {md['general.architecture']}, "
                 f"expected {spec['arch']}")
    n_vocab = len(md["tokenizer.ggml.tokens"])
    tied = all(t.name != "output.weight" for t in reader.tensors)
    cfg = CONFIGS[spec["arch"]](md, n_vocab, tied, transformers.__version__)
    write_json(work / "config.json", cfg)
    write_json(work / "generation_config.json", generation_config(cfg))
    make_tokenizer(md, spec["tokenizer_class"], cfg["max_position_embeddings"], work)
    t1 = time.time()
    tensors = convert_tensors(reader, spec["arch"], cfg)
    embd = tensors["model.embed_tokens.weight"]
    if embd.shape != (cfg["vocab_size"], cfg["hidden_size"]):
        sys.exit(f"make_hf_checkpoint: {name}: embedding {embd.shape} does not match the config")
    write_safetensors(tensors, work / "model.safetensors")
    del tensors
    t2 = time.time()

    names = {}
    for f in FILES:
        h = blob_name(work / f)
        os.chmod(work / f, 0o644)  # serialize_file creates 0600; the Hub client's blobs are 0644
        os.replace(work / f, blobs / h)
        names[f] = h
        link = snap / f
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(f"../../blobs/{h}", link)
    work.rmdir()
    tmp = folder / "refs" / ".main.incomplete"
    tmp.write_text(commit)
    os.replace(tmp, folder / "refs" / "main")
    # Drop what an older FORMAT_VERSION left: other snapshots, unreferenced blobs.
    for s in (folder / "snapshots").iterdir():
        if s.name != commit:
            for p in s.iterdir():
                p.unlink()
            s.rmdir()
    for b in blobs.iterdir():
        if b.name not in names.values():
            shutil.rmtree(b) if b.is_dir() else b.unlink()
    size = sum((blobs / h).stat().st_size for h in names.values())
    log(f"{name}: wrote {spec['repo']}@{commit} ({size / 1e6:.0f} MB; tokenizer and config "
        f"{t1 - t0:.1f} s, tensors {t2 - t1:.1f} s)")


def main():
    # transformers says on import that it found no torch: this script never needs it.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=kvad_home() / "hf-cache",
                    help="the HF hub cache to write (default: $KVAD_HOME/hf-cache)")
    ap.add_argument("--model", action="append", choices=sorted(MODELS),
                    help="store name (repeatable; default: all)")
    ap.add_argument("--models-dir", type=Path, default=kvad_home() / "models",
                    help="where NAME.gguf lives (default: $KVAD_HOME/models)")
    ap.add_argument("--force", action="store_true", help="rebuild even when up to date")
    ap.add_argument("--check", action="store_true", help="re-hash the blobs to decide what is up to date")
    args = ap.parse_args()
    for name in args.model or list(MODELS):
        if not args.force and up_to_date(args.out, name, args.check):
            log(f"{name}: up to date ({MODELS[name]['repo']}@{commit_id(name)[:12]})")
            continue
        gguf_path = args.models_dir / f"{name}.gguf"
        if not gguf_path.is_file():
            sys.exit(f"make_hf_checkpoint: {gguf_path} is missing (run scripts/fetch_model {name})")
        build(args.out, name, gguf_path)


if __name__ == "__main__":
    main()
