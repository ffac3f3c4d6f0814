"""Seeds for fuzz/fuzz_model_hparams.cpp (tests/fixtures/model_hparams) and
fuzz/fuzz_hf_config.cpp (tests/fixtures/hf_config_seeds): for each tiny
checkpoint the target can pick (sorted, as the targets index them: those
with a llama.cpp conversion, resp. with model.safetensors), one input that
loads it unedited, one that zeroes a field and one that doubles (GGUF) or
nulls (config.json) one (the targets' record format: [key][op][int32]),
each followed by 3 token bytes."""
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "hf_tiny"


def write(out, names, third_op):
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    for i, name in enumerate(names):
        tokens = bytes([1, 2, 3])
        (out / f"{name}-plain").write_bytes(bytes([i]) + tokens)
        (out / f"{name}-zero").write_bytes(bytes([i]) + struct.pack("<BBi", 3, 1, 0) + tokens)
        (out / f"{name}-edit").write_bytes(bytes([i]) + struct.pack("<BBi", 5, third_op, 0) + tokens)
    print(len(names), "checkpoints,", 3 * len(names), "seeds in", out)


def main():
    gguf = sorted(p.parent.name for p in TINY.glob("*/llama.cpp-f32.gguf"))
    write(ROOT / "tests" / "fixtures" / "model_hparams", gguf, 4)  # op 4: the old value times 2
    hf = sorted(p.parent.name for p in TINY.glob("*/model.safetensors") if (p.parent / "config.json").exists())
    write(ROOT / "tests" / "fixtures" / "hf_config_seeds", hf, 4)  # op 4: null


if __name__ == "__main__":
    main()
