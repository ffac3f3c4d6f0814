#!/usr/bin/env python3
"""A fuzz seed for Tokenizer::from_gguf's kvad.tokenizer.* path: the
metadata (no tensors) of a quantize-once cache GGUF that kvad wrote from an
HF tokenizer.json. Usage (gguf-py from PyPI):

  python tools/make_tokenizer_gguf_seed.py CACHE.gguf tests/fixtures/hf_tokenizer/seeds-gguf/NAME.gguf

Make CACHE.gguf with a small tokenizer, e.g. `kvad run --model DIR --quant q8_0`
on a tiny checkpoint with a tokenizer.json; only tokenizer.* and
kvad.tokenizer.* keys are kept."""
import sys

import gguf


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch="llama")
    for f in r.fields.values():
        if not (f.name.startswith("tokenizer.") or f.name.startswith("kvad.tokenizer")):
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            sub = f.types[1] if len(f.types) > 1 else gguf.GGUFValueType(int(f.parts[3][0]))  # an empty array
            if sub == gguf.GGUFValueType.STRING:
                vals = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            else:
                vals = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(f.name, vals, t, sub_type=sub)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(f.name, bytes(f.parts[f.data[0]]).decode("utf-8"), t)
        else:
            w.add_key_value(f.name, f.parts[f.data[0]].tolist()[0], t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


if __name__ == "__main__":
    main()
