"""Helpers shared by the fixture scripts in tools/ (standard library only;
numpy is imported by the one function that needs it)."""

import hashlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def kvad_home():
    """$KVAD_HOME, else ~/.cache/kvad (as kvad itself resolves it)."""
    return Path(os.environ.get("KVAD_HOME") or Path.home() / ".cache" / "kvad")


def sha256_file(path):
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def expected_sha256(name, tool):
    """The sha256 scripts/models.tsv pins for store model NAME; exits naming TOOL when it is not listed."""
    for line in (ROOT / "scripts" / "models.tsv").read_text().splitlines():
        f = line.split("\t")
        if not line.startswith("#") and len(f) == 5 and f[0] == name:
            return f[4].strip()
    sys.exit(f"{tool}: {name} is not in scripts/models.tsv")


def top_k(row, k, value=float):
    """[[id, value(logit)] x k] of one logits row, by logit descending then id."""
    import numpy as np
    row = np.asarray(row, dtype=np.float32)
    ids = np.lexsort((np.arange(row.size), -row))[:k]
    return [[int(i), value(row[i])] for i in ids]


def _flat(x):
    return not isinstance(x, (list, dict)) or (
        isinstance(x, list) and all(not isinstance(y, (list, dict)) for y in x))


def dumps(obj, separators=(", ", ": "), ind=0):
    """JSON with a list of scalars, or of lists of scalars, on one line."""
    pad, pad1 = " " * ind, " " * (ind + 1)
    if isinstance(obj, dict):
        items = [f"{pad1}{json.dumps(k)}: {dumps(v, separators, ind + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and not all(_flat(y) for y in obj):
        return "[\n" + ",\n".join(pad1 + dumps(v, separators, ind + 1) for v in obj) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False, separators=separators)
