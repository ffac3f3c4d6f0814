#!/usr/bin/env python3
"""Writes tests/fixtures/safetensors/: valid safetensors files and sharded
checkpoints (written by Hugging Face's own serializer) and a corpus of broken
ones (written byte by byte), for tests/io/test_safetensors.cpp and as the seed
corpus of fuzz/fuzz_safetensors.cpp.

The valid files are made by the PyPI package `safetensors` (its Rust
`serialize`, from raw little-endian bytes packed with `struct`, so no numpy or
torch is needed and every dtype kvad reads can be written, BF16 and F8
included), and read back by its `deserialize` to check them. Each broken file
is also given to `deserialize`, and the script says which ones Hugging Face's
reader accepts although kvad refuses them (duplicate keys: the format forbids
them, the reference reader keeps the last one).

Usage (the tools venv of scripts/setup has `safetensors`):
  ~/.cache/kvad/tools-venv/bin/python tools/make_safetensors_fixtures.py [--out DIR]

Output (DIR defaults to tests/fixtures/safetensors; it is emptied first):
  valid/single.safetensors     every dtype, a scalar, an empty tensor, a 5-d tensor, __metadata__
  valid/sharded/               model.safetensors.index.json + two shards
  valid/dir/model.safetensors  a directory checkpoint
  valid/both/                  model.safetensors and an index naming a missing shard
                               (model.safetensors wins, as in transformers)
  valid/expected.json          {file: {tensor: {dtype, shape, hex, values}}}
  broken/*.safetensors         one broken rule each
  broken/MANIFEST.json         {file: [substrings kvad's error must contain]}
  broken_index/<case>/         a sharded checkpoint with one broken rule
  broken_index/outside.safetensors  what a path traversal would reach
  broken_index/MANIFEST.json   {case: {"names": file the error names, "expect": [...]}}

The tests never run this script; its output is committed (a few KB in all).
"""
import argparse
import ctypes
import json
import shutil
import struct
import sys
from pathlib import Path

try:
    from safetensors import TensorSpec, deserialize, serialize
except ImportError:
    sys.exit("needs the PyPI package safetensors: run with ~/.cache/kvad/tools-venv/bin/python")

ROOT = Path(__file__).resolve().parent.parent

# safetensors dtype -> (name TensorSpec takes, struct code or None for raw bytes)
DTYPES = {
    "F32": ("float32", "f"), "F16": ("float16", "e"), "BF16": ("bfloat16", None),
    "I8": ("int8", "b"), "U8": ("uint8", "B"), "I32": ("int32", "i"), "I64": ("int64", "q"),
    "F8_E4M3": ("float8_e4m3fn", None), "F8_E5M2": ("float8_e5m2", None),
}


def bf16_bytes(values):
    # Exactly representable values only: the top half of the f32 bits.
    out = b""
    for v in values:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        assert bits & 0xFFFF == 0, f"{v} is not a bf16 value"
        out += struct.pack("<H", bits >> 16)
    return out


class T:
    """One tensor: its dtype, shape, little-endian bytes and (for formats
    with a C type) its values."""

    def __init__(self, dtype, shape, values=None, raw=None):
        self.dtype, self.shape, self.values = dtype, list(shape), values
        code = DTYPES[dtype][1]
        if raw is not None:
            self.data = bytes(raw)
        elif dtype == "BF16":
            self.data = bf16_bytes(values)
        else:
            self.data = struct.pack("<" + code * len(values), *values)
        n = 1
        for d in self.shape:
            n *= d
        size = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8}.get(dtype, 1)
        assert len(self.data) == n * size, (dtype, shape)


def write_valid(path, tensors, metadata=None):
    """Serializes with Hugging Face's safetensors and checks it reads back."""
    keep = []
    specs = {}
    for name, t in tensors.items():
        buf = ctypes.create_string_buffer(t.data, max(len(t.data), 1))
        keep.append(buf)
        specs[name] = TensorSpec(dtype=DTYPES[t.dtype][0], shape=t.shape,
                                 data_ptr=ctypes.addressof(buf), data_len=len(t.data))
    blob = serialize(specs, metadata)
    back = dict(deserialize(blob))
    assert set(back) == set(tensors), path
    for name, t in tensors.items():
        assert list(back[name]["shape"]) == t.shape and bytes(back[name]["data"]) == t.data, (path, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(blob)


def expected(tensors):
    out = {}
    for name, t in tensors.items():
        e = {"dtype": t.dtype, "shape": t.shape, "hex": t.data.hex()}
        if t.values is not None:
            e["values"] = t.values
        out[name] = e
    return out


def raw_file(header, data=b"", n=None, pad=True):
    """A file from a header given as bytes, str or a JSON-able object."""
    if not isinstance(header, (bytes, str)):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode()
    if pad:  # as Hugging Face's writer: spaces up to a multiple of 8
        header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header) if n is None else n) + header + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def broken_files():
    """(name, bytes, substrings the error must contain)."""
    w12 = struct.pack("<3f", 1.0, 2.0, 3.0)
    ok = {"w": entry("F32", [3], 0, 12)}
    good = raw_file(ok, w12)
    cases = [
        ("too_short", good[:5], ["5 bytes", "8-byte header length", "offset 0"]),
        ("header_len_huge", raw_file(ok, w12, n=1 << 63), ["header length 9223372036854775808", "offset 0", "limit"]),
        ("header_len_over_cap", raw_file(ok, w12, n=100_000_001), ["header length 100000001", "limit of 100000000"]),
        ("header_len_past_eof", raw_file(ok, w12, n=len(good)), ["runs past the end of the file", "offset 0"]),
        ("header_len_zero", raw_file(b"", w12, pad=False), ["does not begin with '{'", "offset 8"]),
        ("truncated_in_header", good[:20], ["runs past the end of the file"]),
        ("truncated_in_data", good[:-4], ["tensor \"w\"", "data_offsets [0, 12]", "runs past the end of the data"]),
        ("header_not_brace", raw_file(b" " + json.dumps(ok).encode(), w12), ["does not begin with '{'"]),
        ("header_array", raw_file(b"[1,2]", b""), ["does not begin with '{'"]),
        ("bad_json", raw_file(b'{"w": {"dtype": "F32", ', w12), ["header is not valid JSON", "at byte"]),
        ("trailing_garbage", raw_file(json.dumps(ok).encode() + b" x", w12), ["header is not valid JSON", "at byte"]),
        ("nul_padding", raw_file(json.dumps(ok).encode() + b"\0\0\0", w12, pad=False), ["header is not valid JSON"]),
        ("invalid_utf8", raw_file(b'{"w\xff": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}', w12),
         ["header is not valid JSON"]),
        ("number_out_of_range", raw_file(b'{"w": {"dtype": "F32", "shape": [1e400], "data_offsets": [0, 12]}}', w12),
         ["header is not valid JSON"]),
        ("deep_nesting", raw_file(b'{"w": ' + b"[" * 40 + b"]" * 40 + b"}", b""), ["nests deeper than 16"]),
        ("duplicate_tensor", raw_file(b'{"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},'
                                      b' "w": {"dtype": "U8", "shape": [12], "data_offsets": [0, 12]}}', w12),
         ["duplicate key \"w\""]),
        ("duplicate_field", raw_file(b'{"w": {"dtype": "U8", "dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}',
                                     w12), ["duplicate key \"dtype\""]),
        ("entry_not_object", raw_file({"w": 5}), ["tensor \"w\"", "number, not an object"]),
        ("missing_dtype", raw_file({"w": {"shape": [3], "data_offsets": [0, 12]}}, w12), ["tensor \"w\"", "missing field dtype"]),
        ("missing_shape", raw_file({"w": {"dtype": "F32", "data_offsets": [0, 12]}}, w12), ["tensor \"w\"", "missing field shape"]),
        ("missing_offsets", raw_file({"w": {"dtype": "F32", "shape": [3]}}, w12), ["tensor \"w\"", "missing field data_offsets"]),
        ("dtype_not_string", raw_file({"w": entry(4, [3], 0, 12)}, w12), ["tensor \"w\"", "dtype is a JSON number"]),
        ("dtype_f64", raw_file({"w": entry("F64", [1], 0, 8)}, w12[:8]), ["tensor \"w\"", "dtype \"F64\"", "not one kvad reads"]),
        ("dtype_bool", raw_file({"w": entry("BOOL", [1], 0, 1)}, b"\1"), ["tensor \"w\"", "dtype \"BOOL\""]),
        ("dtype_lowercase", raw_file({"w": entry("f32", [3], 0, 12)}, w12), ["tensor \"w\"", "dtype \"f32\""]),
        ("shape_not_array", raw_file({"w": entry("F32", 3, 0, 12)}, w12), ["tensor \"w\"", "shape is a JSON number"]),
        ("shape_negative", raw_file({"w": entry("F32", [-3], 0, 12)}, w12), ["tensor \"w\"", "shape[0] is -3"]),
        ("shape_float", raw_file({"w": entry("F32", [1, 3.0], 0, 12)}, w12), ["tensor \"w\"", "shape[1] is 3.0"]),
        ("shape_string", raw_file({"w": entry("F32", ["3"], 0, 12)}, w12), ["tensor \"w\"", "shape[0] is \"3\""]),
        ("shape_dim_too_large", raw_file({"w": entry("U8", [1 << 63], 0, 12)}, w12),
         ["tensor \"w\"", "shape[0] = 9223372036854775808 is too large"]),
        ("shape_overflow", raw_file({"w": entry("F32", [1 << 32, 1 << 32, 2], 0, 12)}, w12),
         ["tensor \"w\"", "more elements than 2^64"]),
        ("shape_bytes_overflow", raw_file({"w": entry("I64", [1 << 61, 2], 0, 12)}, w12),
         ["tensor \"w\"", "more than 2^63 bytes"]),
        ("offsets_not_array", raw_file({"w": {"dtype": "F32", "shape": [3], "data_offsets": 12}}, w12),
         ["tensor \"w\"", "data_offsets is 12"]),
        ("offsets_three", raw_file({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12, 12]}}, w12),
         ["tensor \"w\"", "not an array of two integers"]),
        ("offsets_negative", raw_file({"w": entry("F32", [3], -12, 0)}, w12), ["tensor \"w\"", "data_offsets[0] is -12"]),
        ("offsets_reversed", raw_file({"w": entry("F32", [0], 12, 0)}, w12), ["tensor \"w\"", "data_offsets [12, 0] ends before"]),
        ("offsets_past_end", raw_file({"w": entry("F32", [4], 0, 16)}, w12),
         ["tensor \"w\"", "data_offsets [0, 16] runs past the end of the data (12 bytes"]),
        ("offsets_huge", raw_file({"w": entry("F32", [3], (1 << 64) - 4, (1 << 64) - 1)}, w12),
         ["tensor \"w\"", "runs past the end of the data"]),
        ("size_mismatch", raw_file({"w": entry("F32", [2], 0, 12)}, w12), ["tensor \"w\"", "hold 12 bytes", "needs 8"]),
        ("overlap", raw_file({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}, w12),
         ["tensor \"b\"", "overlaps tensor \"a\"", "data_offsets [4, 12]"]),
        ("overlap_same_bytes", raw_file({"a": entry("F32", [3], 0, 12), "b": entry("U8", [12], 0, 12)}, w12),
         ["overlaps tensor", "data_offsets [0, 12]"]),
        ("overlap_empty_inside", raw_file({"a": entry("F32", [3], 0, 12), "z": entry("F32", [0], 4, 4)}, w12),
         ["tensor \"z\"", "overlaps tensor \"a\""]),
        ("hole", raw_file({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)}, w12),
         ["data bytes [4, 8)", "belong to no tensor", "tensor \"b\""]),
        ("hole_at_start", raw_file({"a": entry("F32", [2], 4, 12)}, w12), ["data bytes [0, 4)", "belong to no tensor"]),
        ("trailing_data", raw_file({"a": entry("F32", [2], 0, 8)}, w12), ["data bytes [8, 12)", "after the last tensor"]),
        ("metadata_not_object", raw_file({"__metadata__": ["a"], **ok}, w12), ["__metadata__ is a JSON array"]),
        ("metadata_not_string", raw_file({"__metadata__": {"format": "pt", "n": 1}, **ok}, w12),
         ["__metadata__[\"n\"] is a JSON number, not a string"]),
        ("metadata_nested", raw_file({"__metadata__": {"m": {"a": "b"}}, **ok}, w12),
         ["__metadata__[\"m\"] is a JSON object, not a string"]),
    ]
    return cases


def index_json(weight_map, metadata=None):
    return json.dumps({"metadata": metadata or {"total_size": 0}, "weight_map": weight_map}, indent=2)


def broken_indexes(out, w_file, v_file, w_and_x_file):
    """Writes broken_index/<case>/ and returns its manifest."""
    cases = {}

    def case(name, index_text, shards, names, expect):
        d = out / name
        d.mkdir(parents=True)
        (d / "model.safetensors.index.json").write_text(index_text)
        for fname, blob in shards.items():
            (d / fname).parent.mkdir(parents=True, exist_ok=True)
            (d / fname).write_bytes(blob)
        cases[name] = {"names": names, "expect": expect}

    idx = "model.safetensors.index.json"
    plain = ["is not a plain file name"]
    case("traversal", index_json({"w": "../outside.safetensors"}), {}, idx, ["weight_map[\"w\"]", "\"../outside.safetensors\""] + plain)
    case("absolute", index_json({"w": "/etc/outside.safetensors"}), {}, idx,
         ["weight_map[\"w\"]", "\"/etc/outside.safetensors\""] + plain)
    case("subdir", index_json({"w": "sub/model.safetensors"}), {"sub/model.safetensors": w_file}, idx,
         ["weight_map[\"w\"]", "\"sub/model.safetensors\""] + plain)
    case("backslash", index_json({"w": "..\\outside.safetensors"}), {}, idx, ["weight_map[\"w\"]"] + plain)
    case("empty_name", index_json({"w": ""}), {}, idx, ["weight_map[\"w\"] = \"\""] + plain)
    case("dot", index_json({"w": "."}), {}, idx, ["weight_map[\"w\"] = \".\""] + plain)
    case("dotdot", index_json({"w": ".."}), {}, idx, ["weight_map[\"w\"] = \"..\""] + plain)
    case("not_json", "{\"weight_map\": {", {}, idx, ["index is not valid JSON"])
    case("not_object", "[1, 2]", {}, idx, ["index is a JSON array, not an object"])
    case("no_weight_map", json.dumps({"metadata": {"total_size": 0}}), {}, idx, ["missing field weight_map"])
    case("weight_map_not_object", json.dumps({"weight_map": ["w"]}), {}, idx, ["weight_map is a JSON array"])
    case("shard_not_string", json.dumps({"weight_map": {"w": 3}}), {}, idx, ["weight_map[\"w\"] is a JSON number"])
    case("metadata_not_object", json.dumps({"metadata": 5, "weight_map": {"w": "a.safetensors"}}),
         {"a.safetensors": w_file}, idx, ["metadata is a JSON number"])
    case("duplicate", '{"weight_map": {"w": "a.safetensors", "w": "b.safetensors"}}',
         {"a.safetensors": w_file, "b.safetensors": w_file}, idx, ["duplicate key \"w\""])
    case("missing_shard", index_json({"w": "model-00002-of-00002.safetensors"}), {}, idx,
         ["weight_map names shard \"model-00002-of-00002.safetensors\"", "cannot be read"])
    case("tensor_not_in_shard", index_json({"w": "a.safetensors", "v": "a.safetensors"}), {"a.safetensors": w_file},
         idx, ["weight_map[\"v\"] names shard \"a.safetensors\"", "has no tensor v"])
    case("shard_tensor_not_in_index", index_json({"w": "a.safetensors"}), {"a.safetensors": w_and_x_file},
         "a.safetensors", ["tensor x is not in the weight_map"])
    case("wrong_shard", index_json({"w": "b.safetensors", "v": "a.safetensors"}),
         {"a.safetensors": w_file, "b.safetensors": v_file}, "a.safetensors",
         ["tensor w is in shard \"a.safetensors\"", "puts it in \"b.safetensors\""])
    case("broken_shard", index_json({"w": "a.safetensors"}), {"a.safetensors": w_file[:-4]}, "a.safetensors",
         ["tensor \"w\"", "runs past the end of the data"])
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests/fixtures/safetensors")
    args = ap.parse_args()
    out = args.out
    if out.exists():
        shutil.rmtree(out)

    # valid/single.safetensors: every dtype; values exactly representable.
    single = {
        "model.embed_tokens.weight": T("BF16", [2, 2, 2], [1.0, -1.0, 0.5, 256.0, 3.140625, -0.00390625, 65536.0, -0.0]),
        "f32.matrix": T("F32", [2, 3], [0.5, -1.25, 3.0, 1024.0, -0.0078125, 7.0]),
        "f16.vector": T("F16", [4], [1.0, -2.5, 65504.0, 2.0 ** -14]),
        "i8.vector": T("I8", [5], [-128, -1, 0, 1, 127]),
        "u8.vector": T("U8", [3], [0, 128, 255]),
        "i32.matrix": T("I32", [2, 2], [-2147483648, -1, 0, 2147483647]),
        "i64.vector": T("I64", [2], [-9223372036854775808, 9223372036854775807]),
        "f8_e4m3.vector": T("F8_E4M3", [4], raw=[0x38, 0xB8, 0x7E, 0x00]),  # 1, -1, 448, 0
        "f8_e5m2.vector": T("F8_E5M2", [2], raw=[0x3C, 0xC0]),  # 1, -2
        "scalar": T("F32", [], [42.0]),
        "empty": T("F32", [0, 3], []),
        "rank5": T("F16", [1, 2, 1, 2, 2], [float(i) for i in range(8)]),
    }
    write_valid(out / "valid/single.safetensors", single, {"format": "pt", "note": "kvad fixture"})

    shard1 = {
        "model.embed_tokens.weight": T("BF16", [4, 3], [float(i - 6) for i in range(12)]),
        "model.layers.0.mlp.up_proj.weight": T("F32", [2, 3], [0.25 * i for i in range(6)]),
    }
    shard2 = {
        "model.norm.weight": T("F32", [3], [1.0, 1.5, 2.0]),
        "lm_head.weight": T("F16", [4, 3], [0.125 * (i - 6) for i in range(12)]),
    }
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    write_valid(out / "valid/sharded" / names[0], shard1, {"format": "pt"})
    write_valid(out / "valid/sharded" / names[1], shard2, {"format": "pt"})
    wm = {k: names[0] for k in shard1} | {k: names[1] for k in shard2}
    total = sum(len(t.data) for t in (shard1 | shard2).values())
    (out / "valid/sharded/model.safetensors.index.json").write_text(
        index_json(dict(sorted(wm.items())), {"total_size": total}))

    small = {"model.norm.weight": T("F32", [3], [1.0, 2.0, 4.0]), "lm_head.weight": T("BF16", [1, 2], [0.5, -0.5])}
    write_valid(out / "valid/dir/model.safetensors", small)
    write_valid(out / "valid/both/model.safetensors", small)
    (out / "valid/both/model.safetensors.index.json").write_text(
        index_json({"model.norm.weight": "model-00001-of-00001.safetensors"}))

    exp = {
        "single.safetensors": expected(single),
        "sharded": expected(shard1 | shard2),
        "dir": expected(small),
    }
    (out / "valid/expected.json").write_text(json.dumps(exp, indent=1) + "\n")

    # broken/
    (out / "broken").mkdir(parents=True)
    manifest = {}
    ref_accepts = []
    for name, blob, expect in broken_files():
        fname = name + ".safetensors"
        (out / "broken" / fname).write_bytes(blob)
        manifest[fname] = expect
        try:
            deserialize(blob)
            ref_accepts.append(fname)
        except Exception:
            pass
    (out / "broken/MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")

    # broken_index/
    w_file = raw_file({"w": entry("F32", [3], 0, 12)}, struct.pack("<3f", 1, 2, 3))
    v_file = raw_file({"v": entry("F32", [1], 0, 4)}, struct.pack("<f", 5))
    wx_file = raw_file({"w": entry("F32", [3], 0, 12), "x": entry("F32", [1], 12, 16)}, struct.pack("<4f", 1, 2, 3, 4))
    for blob in (w_file, v_file, wx_file):
        deserialize(blob)  # valid for Hugging Face's reader
    bi = out / "broken_index"
    bi.mkdir()
    (bi / "outside.safetensors").write_bytes(w_file)
    imanifest = broken_indexes(bi, w_file, v_file, wx_file)
    (bi / "MANIFEST.json").write_text(json.dumps(imanifest, indent=1) + "\n")

    n_bytes = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({n_bytes} bytes): {len(manifest)} broken files, {len(imanifest)} broken indexes")
    big = [p for p in out.rglob("*") if p.is_file() and p.stat().st_size > 1024]
    for p in big:
        print(f"  note: {p.relative_to(out)} is {p.stat().st_size} bytes")
    print("Hugging Face's reader accepts (kvad refuses):", ", ".join(ref_accepts) or "none")


if __name__ == "__main__":
    main()
