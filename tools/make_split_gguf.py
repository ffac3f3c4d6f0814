#!/usr/bin/env python3
"""A split GGUF made by gguf-py's own writer, for kvad's split-model test.

Reads tests/fixtures/gguf_split/tiny.gguf (a tiny random llama written by
kvad's tools/random_gguf/make_random_gguf: `build/make_random_gguf tiny
tests/fixtures/gguf_split/tiny.gguf --seed 3`) with gguf.GGUFReader and writes
the same metadata and tensors with gguf.GGUFWriter(split_max_tensors=N) as
tiny-00001-of-0000K.gguf ... (split.no, split.count, split.tensors.count as
gguf-py and llama.cpp's gguf-split write them). tests/engine/test_gguf_split.cpp
loads the parts as one model and compares its logits with tiny.gguf's.

    ~/.cache/kvad/bench-venv/bin/python tools/make_split_gguf.py   # needs gguf, numpy
"""
from pathlib import Path

import gguf

DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "gguf_split"


def main():
    r = gguf.GGUFReader(DIR / "tiny.gguf")
    arch = r.fields["general.architecture"].contents()
    for old in DIR.glob("tiny-*-of-*.gguf"):
        old.unlink()
    w = gguf.GGUFWriter(DIR / "tiny.gguf", arch, split_max_tensors=7)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vt = field.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, field.contents(), vt, sub_type=field.types[-1])
        else:
            w.add_key_value(name, field.contents(), vt)
    for t in r.tensors:
        # raw_shape: the array as stored (bytes per row for block formats), as gguf-py wants it
        w.add_tensor(t.name, t.data, raw_shape=list(t.data.shape), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for p in sorted(DIR.glob("tiny-*-of-*.gguf")):
        print(p.name, p.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
