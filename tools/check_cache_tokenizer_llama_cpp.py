#!/usr/bin/env python3
"""Does llama.cpp tokenize a quantize-once cache GGUF as HF `tokenizers`
does? The file's tokenizer.ggml.* keys are kvad's (tokenizer_json_gguf_keys,
after llama.cpp's convert_hf_to_gguf.py); this loads only its vocabulary in
llama-cpp-python and compares, on the strings of a tokenizer fixture
(tests/fixtures/hf_tokenizer/NAME.cases.json.gz: the peer tokenizer suites'
strings and generated ones), llama.cpp's ids with those of `tokenizers` on
the checkpoint's tokenizer.json (special-token text parsed, nothing added).

  LLAMA_CPP_LIB_PATH=/tmp/lcpp/build/bin PYTHONPATH=/tmp/lcpp/llama_cpp_python-0.3.36 \\
  ~/.cache/kvad/torch-venv/bin/python tools/check_cache_tokenizer_llama_cpp.py \\
      CACHE.gguf SNAPSHOT/tokenizer.json [tests/fixtures/hf_tokenizer/gpt2.cases.json.gz]
"""
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    gguf, tok_json = sys.argv[1:3]
    cases = sys.argv[3] if len(sys.argv) > 3 else ROOT / "tests/fixtures/hf_tokenizer/gpt2.cases.json.gz"
    from llama_cpp import Llama
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(tok_json)
    llm = Llama(model_path=gguf, vocab_only=True, verbose=False)
    strings = [c[0] for c in json.loads(gzip.open(cases).read())["cases"]]
    n = equal = 0
    shown = 0
    for s in strings:
        want = hf.encode(s, add_special_tokens=False).ids
        got = llm.tokenize(s.encode("utf-8"), add_bos=False, special=True)
        n += 1
        if got == want:
            equal += 1
        elif shown < 5:
            shown += 1
            print(f"differs: {s[:60]!r}\n  tokenizers {want[:16]}\n  llama.cpp  {got[:16]}")
    print(f"{Path(gguf).name}: llama.cpp {llm.metadata.get('tokenizer.ggml.model')}/"
          f"{llm.metadata.get('tokenizer.ggml.pre')}: {equal}/{n} strings equal to tokenizers")


if __name__ == "__main__":
    main()
