"""Seeds of JSON objects with many keys for fuzz/fuzz_openai_request.cpp:
10^5- and 10^6-key objects (1 to 11 MB each, too large to keep in git) on
each API the target parses -- an ignored field, logit_bias, a schema's
$defs, Anthropic's and the Responses API's bodies, one key repeated -- plus
the 2000-key seed that tests/fixtures/server/requests keeps
(many_keys_2000.json, with --fixture). Standard library only.

  python3 tools/make_many_keys_seeds.py /tmp/corpus            # the big seeds
  python3 tools/make_many_keys_seeds.py --fixture               # the kept one
"""
import argparse
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
MSGS = '[{"role": "user", "content": "Hi"}]'


def keys(n, value="0", same=False, prefix=""):
    return "{" + ",".join('"%s":%s' % ("k" if same else prefix + str(i), value) for i in range(n)) + "}"


def seeds(n):
    tag = "1e%d" % (len(str(n)) - 1)
    defs = keys(n, '{"type": "integer"}', prefix="d")
    return {
        f"many_keys_{tag}_ignored.json": '{"model": "m", "messages": %s, "x": %s}' % (MSGS, keys(n)),
        f"many_keys_{tag}_logit_bias.json": '{"model": "m", "messages": %s, "logit_bias": %s}' % (MSGS, keys(n)),
        f"many_keys_{tag}_prompt.json": '{"model": "m", "prompt": "Hi", "metadata": %s}' % keys(n),
        f"many_keys_{tag}_defs.json": ('{"model": "m", "messages": %s, "response_format": {"type": "json_schema", '
                                       '"json_schema": {"name": "n", "schema": {"$defs": %s, "$ref": "#/$defs/d%d"}}}}'
                                       % (MSGS, defs, n - 1)),
        f"many_keys_{tag}_anthropic.json": '{"model": "m", "max_tokens": 5, "messages": %s, "x": %s}' % (MSGS, keys(n)),
        f"many_keys_{tag}_responses.json": '{"model": "m", "input": "Hi", "metadata": %s}' % keys(n),
        f"many_keys_{tag}_one_key.json": '{"model": "m", "messages": %s, "x": %s}' % (MSGS, keys(n, same=True)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="folder for the 10^5- and 10^6-key seeds")
    ap.add_argument("--fixture", action="store_true", help="write tests/fixtures/server/requests/many_keys_2000.json")
    a = ap.parse_args()
    if a.fixture:
        p = ROOT / "tests" / "fixtures" / "server" / "requests" / "many_keys_2000.json"
        p.write_text('{"model": "m", "messages": %s, "logit_bias": %s, "x": %s}\n' %
                     (MSGS, keys(1000), keys(2000, '{"a": [1]}')))
        print(p, p.stat().st_size, "bytes")
    if a.out:
        out = pathlib.Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        for n in (10 ** 5, 10 ** 6):
            for name, text in seeds(n).items():
                json.loads(text)  # each is valid JSON
                (out / name).write_text(text)
                print(out / name, len(text), "bytes")
    if not a.fixture and not a.out:
        ap.error("give an output folder, --fixture, or both")


if __name__ == "__main__":
    main()
