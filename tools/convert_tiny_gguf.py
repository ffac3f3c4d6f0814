#!/usr/bin/env python3
"""The tiny HF checkpoints of tests/fixtures/hf_tiny converted to GGUF by
llama.cpp's own converter (convert_hf_to_gguf.py), f32, for
the GGUF-path checks of tests/model/test_hf_checkpoint.cpp and
tests/model/text/ (kvad must read
llama.cpp's tensor names and metadata keys, and give transformers' logits).

The checkpoints have no tokenizer, so the converter's set_vocab is replaced
by a placeholder vocabulary of vocab_size tokens; everything else is the
converter's own code. The converter comes from the llama-cpp-python source
distribution on PyPI (it vendors llama.cpp):

    pip download llama-cpp-python --no-deps --no-binary :all: -d /tmp/lcp
    tar xzf /tmp/lcp/llama_cpp_python-*.tar.gz -C /tmp/lcp
    ~/.cache/kvad/torch-venv/bin/python tools/convert_tiny_gguf.py \\
        /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp NAME...

writes tests/fixtures/hf_tiny/NAME/llama.cpp-f32.gguf for each NAME, and
llama.cpp's logits on it (llama.cpp-f32.logits.json) when llama_cpp imports.
"""
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "hf_tiny"


def main():
    llama_cpp = Path(sys.argv[1])
    names = sys.argv[2:]
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    sys.path.insert(0, str(llama_cpp))
    import gguf
    import convert_hf_to_gguf as conv
    from conversion.base import TextModel

    def placeholder_vocab(self):
        n = self.hparams.get("vocab_size") or self.hparams["text_config"]["vocab_size"]
        # Byte-level BPE over the printable ASCII characters (GPT-2's byte
        # alphabet maps them to themselves) and one merge, so that kvad run
        # can tokenize ASCII prompts for these files.
        # llama.cpp's vocabulary loader looks some special tokens up by name
        # (Phi-3's), so they are there too.
        tokens = [chr(c) for c in range(33, 127)] + ["ab", "<unk>", "<s>", "</s>", "<|endoftext|>", "\u010a"]
        tokens += [f"<t{i}>" for i in range(len(tokens), n)]
        tokens = tokens[:n]
        self.gguf_writer.add_tokenizer_model("gpt2")
        self.gguf_writer.add_tokenizer_pre("default")
        self.gguf_writer.add_token_list(tokens)
        self.gguf_writer.add_token_types([gguf.TokenType.NORMAL] * n)
        self.gguf_writer.add_token_merges(["a b"])
        # gpt_oss_mxfp4 also gets gpt-oss's real chat template (the Harmony
        # format; llama.cpp's models/templates/openai-gpt-oss-120b.jinja), for
        # the server tests of Harmony's channels (tests/server/test_harmony.py).
        if self.dir_model.name == "gpt_oss_mxfp4":
            self.gguf_writer.add_chat_template((llama_cpp / "models" / "templates" / "openai-gpt-oss-120b.jinja").read_text())

    # Architecture classes are imported lazily, so the placeholder goes on
    # each instance (an instance attribute wins over any subclass's method).
    prepare = TextModel.prepare_metadata

    def prepare_metadata(self, *args, **kwargs):
        self.set_vocab = types.MethodType(placeholder_vocab, self)
        return prepare(self, *args, **kwargs)
    TextModel.prepare_metadata = prepare_metadata

    for name in names:
        d = OUT / name
        out = d / "llama.cpp-f32.gguf"
        sys.argv = ["convert_hf_to_gguf.py", str(d), "--outfile", str(out), "--outtype", "f32"]
        if name.startswith(("qwen3next", "qwen35")):
            sys.argv.append("--no-mtp")  # a tiny checkpoint has no multi-token-prediction layers
        conv.main()
        print(name, out.stat().st_size, "bytes")
        write_llama_cpp_logits(d, out)


def write_llama_cpp_logits(d, gguf_path):
    """llama.cpp's own logits on the GGUF, at every position of the fixture's
    prompt, as llama.cpp-f32.logits.json (same layout as logits.json), when
    llama-cpp-python can be imported (PYTHONPATH=<sdist> and
    LLAMA_CPP_LIB_PATH=<a build's bin/> work for an sdist built elsewhere)."""
    try:
        import llama_cpp
    except ImportError:
        print("  (no llama_cpp: llama.cpp's logits not written)")
        return
    tokens = json.loads((d / "logits.json").read_text())["tokens"]
    n_ctx = 64 if len(tokens) <= 64 else 128  # qwen3next's 80-token prompt
    try:
        m = llama_cpp.Llama(str(gguf_path), logits_all=True, n_ctx=n_ctx, n_batch=n_ctx, verbose=False)
    except ValueError as e:
        # llama.cpp takes a deepseek2 file without q_lora_rank only at
        # DeepSeek-V2-Lite's 26 or 27 layers (its is_lite rule): the tiny
        # V2-Lite GGUF is checked against transformers alone.
        print("  llama.cpp cannot load it, no llama.cpp logits:", e)
        return
    m.eval(tokens)
    logits = [[round(float(v), 6) for v in m.scores[i]] for i in range(len(tokens))]
    (d / "llama.cpp-f32.logits.json").write_text(json.dumps({"tokens": tokens, "logits": logits,
                                                             "llama_cpp_python": llama_cpp.__version__}))


if __name__ == "__main__":
    main()
