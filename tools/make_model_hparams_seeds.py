"""Seeds for fuzz/fuzz_model_hparams.cpp in tests/fixtures/model_hparams:
for each tiny checkpoint with a llama.cpp conversion (sorted, as the target
indexes them), one input that loads it unedited and one that zeroes and
one that doubles a numeric key (the target's record format: [key][op][int32]),
each followed by 3 token bytes."""
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "model_hparams"


def main():
    files = sorted(p.parent.name for p in (ROOT / "tests" / "fixtures" / "hf_tiny").glob("*/llama.cpp-f32.gguf"))
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.iterdir():
        old.unlink()
    for i, name in enumerate(files):
        tokens = bytes([1, 2, 3])
        (OUT / f"{name}-plain").write_bytes(bytes([i]) + tokens)
        (OUT / f"{name}-zero").write_bytes(bytes([i]) + struct.pack("<BBi", 3, 1, 0) + tokens)
        (OUT / f"{name}-double").write_bytes(bytes([i]) + struct.pack("<BBi", 5, 4, 0) + tokens)
    print(len(files), "checkpoints,", 3 * len(files), "seeds in", OUT)


if __name__ == "__main__":
    main()
