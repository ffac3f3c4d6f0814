"""POST /v1/embeddings with the official `openai` client against `kvad serve`
on the real all-MiniLM-L6-v2 (scripts/setup puts it in the store), compared
with sentence-transformers' embeddings (tests/fixtures/embeddings/minilm, made
by tools/make_embeddings_reference.py): float and base64, strings and token
ids, one input and many; bad requests get OpenAI-style 400s; chat and
completions on an embedding model get a 400 naming its kind; a text model
serves embeddings with --embeddings (last-token pooling)."""
import base64
import json
import math
import os
import struct
from pathlib import Path

import openai
import pytest

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "embeddings" / "minilm"


def store_dir():
    home = os.environ.get("KVAD_HOME") or os.path.join(os.environ.get("HOME", "."), ".cache", "kvad")
    return Path(home) / "models" / MODEL


def load_fixture():
    texts, ids = [], []
    for line in (FIXTURE / "sentences.jsonl").read_text(encoding="utf-8").splitlines():
        j = json.loads(line)
        texts.append(j["text"])
        ids.append(j["ids"])
    raw = (FIXTURE / "embeddings.f32").read_bytes()
    dim = json.loads((FIXTURE / "meta.json").read_text())["dim"]
    flat = struct.unpack("<%df" % (len(raw) // 4), raw)
    return texts, ids, [flat[i * dim:(i + 1) * dim] for i in range(len(texts))]


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


@pytest.fixture
def emb_server(start_server):
    if not (store_dir() / "model.safetensors").exists():
        pytest.skip("%s is not in the store (run scripts/setup)" % MODEL)
    return start_server("--model", MODEL)


_clients = []


def client_for(s):
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
    _clients.append(c)
    return c


@pytest.fixture(autouse=True)
def close_clients(start_server):
    # Torn down before the servers: a kept-alive connection would hold
    # the server's stop() for its keep-alive timeout (5 s).
    yield
    while _clients:
        _clients.pop().close()


def test_float_and_base64_match_sentence_transformers(emb_server):
    texts, ids, ref = load_fixture()
    # Skip the empty string (OpenAI refuses it; the C++ test covers it).
    pick = [i for i in range(0, len(texts), 3) if texts[i]][:64]
    c = client_for(emb_server)
    worst = 1.0
    for fmt in ("float", "base64"):
        r = c.embeddings.create(model=MODEL, input=[texts[i] for i in pick], encoding_format=fmt)
        assert r.object == "list" and r.model == MODEL
        assert [d.index for d in r.data] == list(range(len(pick)))
        assert r.usage.prompt_tokens == r.usage.total_tokens == sum(len(ids[i]) for i in pick)
        for d, i in zip(r.data, pick):
            v = d.embedding
            if isinstance(v, str):  # the client leaves base64 as is when asked for it explicitly
                raw = base64.b64decode(v)
                v = struct.unpack("<%df" % (len(raw) // 4), raw)
            assert len(v) == 384
            cs = cosine(v, ref[i])
            worst = min(worst, cs)
            assert cs >= 0.9999, (i, texts[i], cs)
    # The client's default asks for base64 and decodes it to floats.
    r = c.embeddings.create(model=MODEL, input=texts[pick[0]])
    assert len(r.data) == 1 and cosine(r.data[0].embedding, ref[pick[0]]) >= 0.9999
    print("min cosine over %d sentences, float and base64: %.7f" % (len(pick), worst))


def test_base64_is_little_endian_f32_of_the_float_answer(emb_server):
    body = {"model": MODEL, "input": ["A man is eating food.", "Привет, как дела?"]}
    st, f = emb_server.request("POST", "/v1/embeddings", dict(body, encoding_format="float"))
    assert st == 200
    st, b = emb_server.request("POST", "/v1/embeddings", dict(body, encoding_format="base64"))
    assert st == 200
    for fd, bd in zip(json.loads(f)["data"], json.loads(b)["data"]):
        raw = base64.b64decode(bd["embedding"])
        assert list(struct.unpack("<384f", raw)) == pytest.approx(fd["embedding"], abs=0, rel=1e-7)


def test_token_id_inputs(emb_server):
    texts, ids, ref = load_fixture()
    c = client_for(emb_server)
    r = c.embeddings.create(model=MODEL, input=[ids[0], ids[5], ids[-1]], encoding_format="float")
    for d, i in zip(r.data, (0, 5, len(ids) - 1)):
        assert cosine(d.embedding, ref[i]) >= 0.9999
    assert r.usage.prompt_tokens == len(ids[0]) + len(ids[5]) + len(ids[-1])
    r = c.embeddings.create(model=MODEL, input=ids[1], encoding_format="float")  # one list of ids
    assert len(r.data) == 1 and cosine(r.data[0].embedding, ref[1]) >= 0.9999
    # dimensions equal to the model's is accepted.
    r = c.embeddings.create(model=MODEL, input="x", dimensions=384, encoding_format="float")
    assert len(r.data[0].embedding) == 384


BAD_REQUESTS = [
    ({"input": "x"}, "model"),
    ({"model": MODEL}, "input"),
    ({"model": MODEL, "input": ""}, "input"),
    ({"model": MODEL, "input": []}, "input"),
    ({"model": MODEL, "input": ["a", ""]}, "input[1]"),
    ({"model": MODEL, "input": ["a", 1]}, "input[1]"),
    ({"model": MODEL, "input": [[101, 102], "a"]}, "input[1]"),
    ({"model": MODEL, "input": [[]]}, "input[0]"),
    ({"model": MODEL, "input": [101, 30522]}, "input"),
    ({"model": MODEL, "input": [101, -1]}, "input"),
    ({"model": MODEL, "input": [101, 1.5]}, "input"),
    ({"model": MODEL, "input": [1000] * 257}, "input"),
    ({"model": MODEL, "input": ["a"] * 2049}, "input"),
    ({"model": MODEL, "input": {"a": 1}}, "input"),
    ({"model": MODEL, "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"model": MODEL, "input": "x", "dimensions": 128}, "dimensions"),
    ({"model": MODEL, "input": "x", "dimensions": "384"}, "dimensions"),
]


def test_bad_requests_are_400(emb_server):
    for body, param in BAD_REQUESTS:
        st, text = emb_server.request("POST", "/v1/embeddings", body)
        assert st == 400, (body, text)
        err = json.loads(text)["error"]
        assert err["type"] == "invalid_request_error" and err["param"] == param, (body, err)
        # The server keeps serving.
        assert emb_server.request("POST", "/v1/embeddings", {"model": MODEL, "input": "ok"})[0] == 200


def test_other_errors(emb_server):
    c = client_for(emb_server)
    with pytest.raises(openai.NotFoundError):
        c.embeddings.create(model="text-embedding-3-small", input="x")
    with pytest.raises(openai.BadRequestError) as e:
        c.embeddings.create(model=MODEL, input="x", dimensions=64)
    assert "384" in str(e.value)
    st, text = emb_server.request("POST", "/v1/embeddings", raw=b"[" * 100)
    assert st == 400 and json.loads(text)["error"]["code"] == "invalid_json"
    st, _ = emb_server.request("GET", "/v1/embeddings")
    assert st == 405
    # The tokens summed over the inputs are bounded too (OpenAI: 300,000).
    st, text = emb_server.request("POST", "/v1/embeddings", {"model": MODEL, "input": [[1000] * 256] * 1200})
    assert st == 400 and "300000" in json.loads(text)["error"]["message"]


def test_chat_and_completions_name_the_kind(emb_server):
    c = client_for(emb_server)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert "embedding" in str(e.value) and "/v1/embeddings" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=MODEL, prompt="hi")
    assert "kind embedding" in str(e.value)
    assert c.models.list().data[0].id == MODEL


def test_text_model_embeddings(start_server):
    # Without --embeddings a text model refuses, naming its kind.
    s = start_server()
    st, text = s.request("POST", "/v1/embeddings", {"model": "smollm2-135m", "input": "hi"})
    assert st == 400 and "kind text" in json.loads(text)["error"]["message"]
    s.stop()  # urllib keeps no connection open
    s = start_server("--embeddings")
    c = client_for(s)
    r = c.embeddings.create(model="smollm2-135m", input=["The cat sat on the mat.", "A dog runs."],
                            encoding_format="float")
    assert len(r.data) == 2 and len(r.data[0].embedding) == 576
    assert abs(sum(x * x for x in r.data[0].embedding) - 1) < 1e-4  # normalised
    # Last-token pooling of a decoder: the same text alone gives the same vector.
    one = c.embeddings.create(model="smollm2-135m", input="A dog runs.", encoding_format="float")
    assert cosine(one.data[0].embedding, r.data[1].embedding) >= 0.99999
    # Chat still works beside it.
    out = c.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert out.choices[0].message.content is not None
