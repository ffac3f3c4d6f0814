#!/usr/bin/env python3
"""Copy the JSON-Schema-Test-Suite (draft 2020-12) into kvad's fixtures.

Usage:
    python3 tools/make_json_schema_suite.py [--sdist jsonschema-X.tar.gz]

The suite (github.com/json-schema-org/JSON-Schema-Test-Suite) ships inside
the source distribution of the PyPI package `jsonschema`, under
json/tests/draft2020-12/. Without --sdist this runs
`pip download --no-binary :all: --no-deps jsonschema` into a temporary
folder. The tests read only what this writes; they never need Python.

Writes tests/fixtures/json_schema_suite/<file>.json for every keyword file
of draft2020-12/ and, from optional/format/, the formats kvad enforces
(format-date-time.json, ...). Each file is the suite's list of groups
{"description", "schema", "tests": [{"description", "valid", "data"}]}
with every test's instance also serialized by Python's json.dumps:
  "compact": separators=(",", ":"), ensure_ascii=False
  "spaced":  separators=(", ", ": "), ensure_ascii=False
so the C++ test feeds exactly these bytes to the grammar. SOURCE.txt
records the package version.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tarfile
import tempfile

FORMATS = ["date-time", "date", "time", "uuid", "email", "ipv4"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sdist")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = os.path.join(root, "tests", "fixtures", "json_schema_suite")
    with tempfile.TemporaryDirectory() as tmp:
        sdist = args.sdist
        if not sdist:
            subprocess.check_call([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                                   "-d", tmp, "jsonschema"])
            sdist = glob.glob(os.path.join(tmp, "jsonschema-*.tar.gz"))[0]
        with tarfile.open(sdist) as tf:
            tf.extractall(tmp, filter="data")
        base = glob.glob(os.path.join(tmp, "jsonschema-*", "json", "tests", "draft2020-12"))[0]
        version = os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(base))))
        files = {os.path.basename(p): p for p in glob.glob(os.path.join(base, "*.json"))}
        for f in FORMATS:
            files["format-" + f + ".json"] = os.path.join(base, "optional", "format", f + ".json")
        os.makedirs(out, exist_ok=True)
        for name, path in sorted(files.items()):
            with open(path, encoding="utf-8") as fh:
                groups = json.load(fh)
            for g in groups:
                for t in g["tests"]:
                    t["compact"] = json.dumps(t["data"], separators=(",", ":"), ensure_ascii=False)
                    t["spaced"] = json.dumps(t["data"], separators=(", ", ": "), ensure_ascii=False)
            with open(os.path.join(out, name), "w", encoding="utf-8") as fh:
                json.dump(groups, fh, ensure_ascii=False, indent=1)
                fh.write("\n")
        with open(os.path.join(out, "SOURCE.txt"), "w") as fh:
            fh.write(f"{version} sdist from PyPI, json/tests/draft2020-12 (JSON-Schema-Test-Suite)\n"
                     "made by tools/make_json_schema_suite.py\n")
    print(f"wrote {len(files)} files to {out}")


if __name__ == "__main__":
    main()
