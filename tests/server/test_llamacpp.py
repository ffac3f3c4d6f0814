"""llama.cpp's own server endpoints on kvad serve, driven with httpx as
llama.cpp's web UI and editor plugins call them (field names and shapes from
llama.cpp's tools/server/README.md): POST /completion with the prompt as text,
token ids or both, n_predict, n_probs, grammar, json_schema, stop, streamed
as server-sent events and not (the same text); /tokenize, /detokenize,
/apply-template, /props, /slots; /infill with a model's fill-in-the-middle
tokens (a copy of SmolLM2's GGUF given tokenizer.ggml.fim_*_token_id keys)
and a 400 saying so on a model without them; bad input is a 4xx."""
import json
import shutil
import struct

import pytest

httpx = pytest.importorskip("httpx", reason="the httpx package is missing (run scripts/setup)")
jsonschema = pytest.importorskip("jsonschema", reason="the jsonschema package is missing (run scripts/setup)")

from conftest import MODEL_NAME, Server, model_path  # noqa: E402

T0 = {"temperature": 0, "seed": 1}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if model_path() is None:
        pytest.skip("model %s not installed (run scripts/setup)" % MODEL_NAME)
    s = Server(["--parallel", "2", "--ctx-size", "1024"], str(tmp_path_factory.mktemp("llamacpp") / "server.log"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


def sse(http, path, body):
    """The data: events of a streamed answer, parsed."""
    out = []
    with http.stream("POST", path, json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out


def test_completion_text_and_stream(http):
    body = {"prompt": "1, 2, 3, 4,", "n_predict": 8, **T0}
    r = http.post("/completion", json=body).json()
    assert r["content"] and r["stop"] is True and r["stop_type"] == "limit"
    assert r["tokens_predicted"] == 8 and r["tokens_evaluated"] > 0 and r["model"] == MODEL_NAME
    assert r["generation_settings"]["n_predict"] == 8 and r["timings"]["predicted_n"] == 8
    assert r["content"].strip().startswith("5")
    events = sse(http, "/completion", {**body, "stream": True})
    assert all(e["stop"] is False for e in events[:-1]) and events[-1]["stop"] is True
    assert "".join(e["content"] for e in events) == r["content"]
    assert sum(len(e["tokens"]) for e in events) == 8  # each token's id goes with its text
    assert events[-1]["stop_type"] == "limit" and events[-1]["timings"]["predicted_n"] == 8


def test_prompt_as_token_ids_and_mixed(http):
    ids = http.post("/tokenize", json={"content": "1, 2, 3, 4,"}).json()["tokens"]
    text = http.post("/completion", json={"prompt": "1, 2, 3, 4,", "n_predict": 6, **T0}).json()
    by_ids = http.post("/completion", json={"prompt": ids, "n_predict": 6, **T0}).json()
    assert by_ids["content"] == text["content"]
    mixed = http.post("/completion", json={"prompt": ids[:2] + [", 3, 4,"], "n_predict": 6, **T0}).json()
    assert mixed["tokens_evaluated"] > 2 and mixed["content"]


def test_n_probs_return_tokens_stop_and_cache(http):
    r = http.post("/completion", json={"prompt": "The capital of France is", "n_predict": 5, "n_probs": 3,
                                       "return_tokens": True, "cache_prompt": True, **T0}).json()
    probs = r["completion_probabilities"]
    assert len(probs) == len(r["tokens"]) == 5
    for p, tid in zip(probs, r["tokens"]):
        assert p["id"] == tid and len(p["top_logprobs"]) == 3 and p["logprob"] <= 0
        assert p["top_logprobs"][0]["logprob"] >= p["top_logprobs"][-1]["logprob"]
        assert bytes(p["bytes"]).decode("utf-8", "replace") == p["token"] or p["bytes"]
    assert "".join(p["token"] for p in probs) == r["content"]
    again = http.post("/completion", json={"prompt": "The capital of France is", "n_predict": 5, **T0}).json()
    assert again["tokens_cached"] > 0 and again["content"] == r["content"]
    full = http.post("/completion", json={"prompt": "1, 2, 3, 4,", "n_predict": 12, **T0}).json()["content"]
    cut = http.post("/completion", json={"prompt": "1, 2, 3, 4,", "n_predict": 12, "stop": ["7"], **T0}).json()
    assert "7" in full and cut["content"] == full.split("7")[0]
    assert cut["stop_type"] == "word" and cut["stopping_word"] == "7"


def test_grammar_and_json_schema(http):
    g = http.post("/completion", json={"prompt": "Answer yes or no:", "grammar": 'root ::= "yes" | "no"',
                                       "n_predict": 10, **T0}).json()
    assert g["content"] in ("yes", "no") and g["stop_type"] == "eos"
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["n"], "additionalProperties": False}
    for stream in (False, True):
        body = {"prompt": "A number as JSON:", "json_schema": schema, "n_predict": 40, **T0}
        if stream:
            text = "".join(e["content"] for e in sse(http, "/completion", {**body, "stream": True}))
        else:
            text = http.post("/completion", json=body).json()["content"]
        jsonschema.validate(json.loads(text), schema)


def test_tokenize_detokenize_apply_template(http):
    t = http.post("/tokenize", json={"content": "Hello world", "with_pieces": True}).json()["tokens"]
    assert "".join(p["piece"] for p in t) == "Hello world" and all(isinstance(p["id"], int) for p in t)
    ids = [p["id"] for p in t]
    assert http.post("/detokenize", json={"tokens": ids}).json()["content"] == "Hello world"
    special = http.post("/tokenize", json={"content": "<|im_start|>"}).json()["tokens"]
    plain = http.post("/tokenize", json={"content": "<|im_start|>", "parse_special": False}).json()["tokens"]
    assert len(special) == 1 and len(plain) > 1
    # A byte that is not UTF-8 on its own comes back as bytes.
    pieces = http.post("/tokenize", json={"content": "\u00e9\u4e2d", "with_pieces": True}).json()["tokens"]
    joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert joined.decode() == "\u00e9\u4e2d"
    p = http.post("/apply-template", json={"messages": [{"role": "user", "content": "Hi"}]}).json()["prompt"]
    assert "<|im_start|>user\nHi<|im_end|>" in p and p.endswith("<|im_start|>assistant\n")


def test_props_and_slots(http):
    p = http.get("/props").json()
    assert p["total_slots"] == 2 and p["model_path"] == model_path()
    assert p["default_generation_settings"]["n_ctx"] == 1024 and "{%" in p["chat_template"]
    assert p["infill"] is False
    s = http.get("/slots").json()
    assert [x["id"] for x in s] == [0, 1] and all(x["n_ctx"] == 1024 and not x["is_processing"] for x in s)


def test_bad_input_is_4xx(http):
    bad = [
        ("/completion", {"n_predict": 3}),
        ("/completion", {"prompt": 5}),
        ("/completion", {"prompt": ["a", "b"]}),
        ("/completion", {"prompt": [999999999]}),
        ("/completion", {"prompt": "x", "n_predict": -3}),
        ("/completion", {"prompt": "x", "grammar": "root ::= ("}),
        ("/completion", {"prompt": "x", "json_schema": {"type": "integer", "minimum": 5, "maximum": 1}}),
        ("/completion", {"prompt": "x", "n_probs": 99}),
        ("/completion", {"prompt": "x", "mirostat": 2}),
        ("/completion", {"prompt": "x", "logit_bias": [["hello", 1]]}),
        ("/completion", {"prompt": "x", "logit_bias": [[99999999, 1]]}),
        ("/completion", {"prompt": "x", "temperature": "hot"}),
        ("/tokenize", {}),
        ("/tokenize", {"content": 3}),
        ("/detokenize", {"tokens": [-1]}),
        ("/detokenize", {"tokens": "abc"}),
        ("/apply-template", {"messages": []}),
        ("/infill", {"input_prefix": "def f(", "input_suffix": ")"}),
    ]
    for path, body in bad:
        r = http.post(path, json=body)
        assert 400 <= r.status_code < 500, (path, body, r.status_code, r.text)
        assert r.json()["error"]["message"], r.text
    r = http.post("/infill", json={"input_prefix": "def f(", "input_suffix": ")"})
    assert "fill-in-the-middle" in r.json()["error"]["message"]
    assert http.post("/completion", content=b"{nope", headers={"Content-Type": "application/json"}).status_code == 400
    assert http.get("/completion").status_code == 405
    # Samplers kvad lacks are accepted at their off values, as llama.cpp's web UI sends them.
    ok = http.post("/completion", json={"prompt": "x", "n_predict": 2, "mirostat": 0, "typical_p": 1.0,
                                        "dry_multiplier": 0.0, "xtc_probability": 0.0, "samplers": ["top_k"], **T0})
    assert ok.status_code == 200


def with_fim_keys(src, dst, keys):
    """Copies the GGUF `src` to `dst` with u32 keys added (GGUF v3: the
    metadata grows, the tensor data is copied after re-padding)."""
    with open(src, "rb") as f:
        data = f.read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    assert magic == b"GGUF" and version == 3
    pos = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(t, pos):
        if t in sizes:
            return pos + sizes[t]
        if t == 8:
            (n,) = struct.unpack_from("<Q", data, pos)
            return pos + 8 + n
        assert t == 9
        et, n = struct.unpack_from("<IQ", data, pos)
        pos += 12
        for _ in range(n):
            pos = skip_value(et, pos)
        return pos

    alignment = 32
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8:pos + 8 + klen].decode()
        pos += 8 + klen
        (t,) = struct.unpack_from("<I", data, pos)
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", data, pos + 4)
        pos = skip_value(t, pos + 4)
    kv_end = pos
    for _ in range(n_tensors):
        (nlen,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + nlen
        (nd,) = struct.unpack_from("<I", data, pos)
        pos += 4 + 8 * nd + 4 + 8
    infos_end = pos
    data_start = (infos_end + alignment - 1) // alignment * alignment
    extra = b"".join(struct.pack("<Q", len(k)) + k.encode() + struct.pack("<II", 4, v) for k, v in keys.items())
    head = struct.pack("<4sIQQ", magic, version, n_tensors, n_kv + len(keys)) + data[24:kv_end] + extra + \
        data[kv_end:infos_end]
    head += b"\0" * ((-len(head)) % alignment)
    with open(dst, "wb") as f:
        f.write(head)
        f.write(data[data_start:])


def test_infill_with_fim_tokens(start_server, tmp_path):
    if model_path() is None:
        pytest.skip("model %s not installed" % MODEL_NAME)
    # SmolLM2's vocabulary has no FIM tokens; this copy names three of its
    # control tokens (<issue_start>, <issue_comment>, <issue_closed>) as them.
    fim = tmp_path / "smollm2-fim.gguf"
    with_fim_keys(model_path(), fim, {"tokenizer.ggml.fim_pre_token_id": 8, "tokenizer.ggml.fim_suf_token_id": 9,
                                      "tokenizer.ggml.fim_mid_token_id": 10})
    s = start_server("--model", str(fim), "--parallel", "1", "--ctx-size", "512")
    with httpx.Client(base_url=s.url, timeout=120) as c:
        assert c.get("/props").json()["infill"] is True
        body = {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n\nprint(add(1, 2))\n",
                "n_predict": 6, **T0}
        r = c.post("/infill", json=body).json()
        assert r["prompt"] == ("<issue_start>def add(a, b):\n    return <issue_comment>\n\nprint(add(1, 2))\n"
                               "<issue_closed>")
        assert r["tokens_predicted"] == 6 or r["stop_type"] == "eos"
        events = sse(c, "/infill", {**body, "stream": True})
        assert "".join(e["content"] for e in events) == r["content"]
        # input_extra with the vocabulary's <repo_name> and <file_sep>: the repo-level pattern.
        r2 = c.post("/infill", json={**body, "input_extra": [{"filename": "util.py", "text": "X = 1\n"}],
                                     "prompt": "a"}).json()
        assert r2["prompt"].startswith("<repo_name>myproject\n<file_sep>util.py\nX = 1\n<issue_start>def add")
        assert r2["prompt"].endswith("<issue_closed>a")
        # ollama's suffix is the same fill in the middle.
        g = c.post("/api/generate", json={"model": fim.stem, "prompt": body["input_prefix"],
                                          "suffix": body["input_suffix"], "stream": False,
                                          "options": {"temperature": 0, "seed": 1, "num_predict": 6}}).json()
        assert g["response"] == r["content"]
