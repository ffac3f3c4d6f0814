"""ollama's API on kvad serve, driven by the official `ollama` Python client
(PyPI): /api/chat and /api/generate streamed and not (the same text at
temperature 0), format as "json" and as a JSON schema, tools with a tool-result
round trip, think, options; /api/tags, /api/show, /api/ps, /api/version;
/api/embed and /api/embeddings against sentence-transformers' vectors;
/api/pull through kvad's Hub client against the loopback Hub of the pull
tests; model names as ollama users type them; bad input answered in
ollama's error shape {"error": "..."} with a 4xx, never a 500."""
import json
import os
import sys
import urllib.request
from pathlib import Path

import pytest

ollama = pytest.importorskip("ollama", reason="the ollama package is missing (run scripts/setup)")
jsonschema = pytest.importorskip("jsonschema", reason="the jsonschema package is missing (run scripts/setup)")

from conftest import MODEL_NAME, Server, model_path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "hub"))
import fake_hub  # noqa: E402

NAME = "smollm2:135m"  # as an ollama user types the store's smollm2-135m
T0 = {"temperature": 0, "seed": 7, "num_predict": 24}
ASK = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if model_path() is None:
        pytest.skip("model %s not installed (run scripts/setup)" % MODEL_NAME)
    s = Server(["--parallel", "2", "--ctx-size", "1024"], str(tmp_path_factory.mktemp("ollama") / "server.log"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    c = ollama.Client(host=server.url)
    yield c
    c.close()


def raw_post(server, path, body):
    """POST through urllib: (status, parsed JSON body)."""
    status, text = server.request("POST", path, body)
    return status, json.loads(text)


@pytest.mark.parametrize("name", [NAME, "smollm2-135m", "SmolLM2-135M:latest"])
def test_chat_not_streamed_and_streamed(client, name):
    r = client.chat(model=name, messages=ASK, options=T0)
    assert r.model == name and r.done and r.done_reason in ("stop", "length")
    assert r.message.role == "assistant" and r.message.content
    assert r.prompt_eval_count > 0 and r.eval_count > 0 and r.total_duration > 0
    parts = list(client.chat(model=name, messages=ASK, options=T0, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert parts[-1].done_reason == r.done_reason and parts[-1].eval_count == r.eval_count
    assert "".join(p.message.content or "" for p in parts) == r.message.content


def test_generate_not_streamed_and_streamed(client):
    r = client.generate(model=NAME, prompt="The capital of France is", options=T0)
    assert r.done and r.response
    parts = list(client.generate(model=NAME, prompt="The capital of France is", options=T0, stream=True))
    assert parts[-1].done and "".join(p.response for p in parts) == r.response
    # raw: no template, a plain continuation; num_predict bounds it.
    raw = client.generate(model=NAME, prompt="1, 2, 3, 4,", raw=True, options={"temperature": 0, "num_predict": 6})
    assert raw.eval_count <= 6 and raw.done_reason == "length" and raw.response.strip().startswith("5")
    # system goes before the prompt as the template's system turn.
    s = client.generate(model=NAME, prompt="Hi", system="Answer in French.", options=T0)
    assert s.done and s.response


def test_options_stop_and_seed(client):
    a = client.generate(model=NAME, prompt="Write a list of fruits:", options={"temperature": 1.0, "seed": 3, "num_predict": 20})
    b = client.generate(model=NAME, prompt="Write a list of fruits:", options={"temperature": 1.0, "seed": 3, "num_predict": 20})
    assert a.response == b.response  # the same seed, the same draw
    full = client.generate(model=NAME, prompt="1, 2, 3, 4,", raw=True, options={"temperature": 0, "num_predict": 12})
    cut = client.generate(model=NAME, prompt="1, 2, 3, 4,", raw=True,
                          options={"temperature": 0, "num_predict": 12, "stop": ["7"],
                                   "num_ctx": 4096, "mirostat": 0, "num_thread": 2})  # ollama-only options ignored
    assert "7" in full.response and cut.response == full.response.split("7")[0] and cut.done_reason == "stop"


def test_format_json_and_schema(client):
    r = client.chat(model=NAME, messages=[{"role": "user", "content": "Describe Paris as JSON."}], format="json",
                    options={"temperature": 0, "num_predict": 120})
    if r.done_reason == "stop":
        assert isinstance(json.loads(r.message.content), dict)
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "population": {"type": "integer", "minimum": 0}},
              "required": ["city", "population"], "additionalProperties": False}
    for stream in (False, True):
        if stream:
            parts = list(client.chat(model=NAME, messages=ASK, format=schema, stream=True,
                                     options={"temperature": 0, "num_predict": 80}))
            text, reason = "".join(p.message.content or "" for p in parts), parts[-1].done_reason
        else:
            r = client.chat(model=NAME, messages=ASK, format=schema, options={"temperature": 0, "num_predict": 80})
            text, reason = r.message.content, r.done_reason
        assert reason == "stop"
        jsonschema.validate(json.loads(text), schema)
    g = client.generate(model=NAME, prompt="Paris as JSON:", format=schema, options={"temperature": 0, "num_predict": 80})
    jsonschema.validate(json.loads(g.response), schema)


@pytest.mark.parametrize("stream", [False, True])
def test_tools_round_trip(client, stream):
    # SmolLM2 at temperature 0 calls the tool when told to (ollama has no tool_choice).
    ask = [{"role": "user", "content": "Call get_weather for Paris."}]
    kw = dict(model=NAME, messages=ask, tools=[WEATHER], options={"temperature": 0, "num_predict": 60})
    if stream:
        parts = list(client.chat(stream=True, **kw))
        calls = [c for p in parts for c in (p.message.tool_calls or [])]
        content = "".join(p.message.content or "" for p in parts)
    else:
        r = client.chat(**kw)
        calls, content = r.message.tool_calls or [], r.message.content
    assert len(calls) == 1, content
    call = calls[0]
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    msgs = ask + [{"role": "assistant", "content": "", "tool_calls": [call]},
                  {"role": "tool", "tool_name": "get_weather", "content": "18 C and sunny"}]
    r2 = client.chat(model=NAME, messages=msgs, tools=[WEATHER], options={"temperature": 0, "num_predict": 30})
    assert r2.done and (r2.message.content or r2.message.tool_calls)
    # A Python function as a tool: the client turns it into a schema.
    def get_time(zone: str) -> str:
        """Get the local time in a time zone.

        Args:
          zone: The time zone, such as Europe/Paris
        """
        return "12:00"
    r3 = client.chat(model=NAME, messages=[{"role": "user", "content": "Say hello."}], tools=[get_time],
                     options={"temperature": 0, "num_predict": 20})
    assert r3.done and (r3.message.content or r3.message.tool_calls)


def test_think_and_keep_alive(client):
    for think in (True, False):
        r = client.chat(model=NAME, messages=ASK, think=think, keep_alive="5m", options=T0)
        assert r.done and r.message.content
        if not think:
            assert not r.message.thinking
    # No messages: ollama's "load the model" request.
    r = client.chat(model=NAME, messages=[], keep_alive=0)
    assert r.done and r.done_reason == "load"
    g = client.generate(model=NAME, prompt="")
    assert g.done and g.done_reason == "load"


def test_logprobs(client):
    r = client.chat(model=NAME, messages=ASK, logprobs=True, top_logprobs=2, options=T0)
    assert r.logprobs and len(r.logprobs) == r.eval_count - (1 if r.done_reason == "stop" else 0)
    assert "".join(lp.token for lp in r.logprobs) == r.message.content
    assert all(len(lp.top_logprobs) == 2 and lp.logprob <= 0 for lp in r.logprobs)


def test_models_listed_shown_running(client, server):
    tags = client.list()
    assert [m.model for m in tags.models] == ["smollm2-135m:latest"]
    d = tags.models[0].details
    assert d.format == "gguf" and d.family == "llama" and d.parameter_size == "135M"
    assert tags.models[0].size == os.path.getsize(model_path())
    s = client.show(NAME)
    assert s.modelinfo["general.architecture"] == "llama" and s.modelinfo["llama.context_length"] > 0
    assert s.modelinfo["tokenizer.ggml.tokens"] == []  # arrays only with verbose, as ollama answers
    assert "completion" in s.capabilities and "tools" in s.capabilities and "{%" in s.template
    ps = client.ps()
    assert [m.model for m in ps.models] == ["smollm2-135m:latest"] and ps.models[0].context_length == 1024
    with urllib.request.urlopen(server.url + "/api/version") as r:
        assert json.loads(r.read())["version"]
    status, body = raw_post(server, "/api/show", {"model": NAME, "verbose": True})
    assert status == 200 and len(body["model_info"]["tokenizer.ggml.tokens"]) == 49152


def test_errors_in_ollama_shape(client, server):
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="llama3.2", messages=ASK)
    assert e.value.status_code == 404 and "llama3.2" in e.value.error and "smollm2-135m" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        list(client.chat(model="llama3.2", messages=ASK, stream=True))
    assert e.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as e:
        client.generate(model="nope", prompt="hi")
    assert e.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as e:
        client.show("nope")
    assert e.value.status_code == 404
    bad = [
        ("/api/chat", {"model": NAME, "messages": ASK, "format": "yaml"}, "format"),
        ("/api/chat", {"model": NAME, "messages": ASK, "format": {"type": "string", "pattern": "(a"}}, "format"),
        ("/api/chat", {"model": NAME, "messages": ASK, "format": 3}, "format"),
        ("/api/chat", {"model": NAME, "messages": ASK, "options": {"temperature": "hot"}}, "options.temperature"),
        ("/api/chat", {"model": NAME, "messages": ASK, "options": {"num_predict": -5}}, "num_predict"),
        ("/api/chat", {"model": NAME, "messages": "hi"}, "messages"),
        ("/api/chat", {"model": NAME, "messages": [{"role": "tool", "content": "x"}]}, "tool"),
        ("/api/chat", {"messages": ASK}, "model"),
        ("/api/chat", {"model": NAME, "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, "images"),
        ("/api/generate", {"model": NAME, "prompt": "x", "context": [1, 2]}, "context"),
        ("/api/generate", {"model": NAME, "prompt": "x", "suffix": "y"}, "fill-in-the-middle"),
        ("/api/embed", {"model": NAME, "input": "x"}, "embeddings"),
        ("/api/pull", {"model": "llama3.2"}, "Hugging Face"),
    ]
    for path, body, word in bad:
        status, j = raw_post(server, path, body)
        assert 400 <= status < 500, (path, body, status, j)
        assert isinstance(j["error"], str) and word in j["error"], (body, j)
    # A body that is not JSON: ollama's shape, the parser's message, and no
    # word of the OpenAI API (whose hint the /v1 routes give).
    for path in ("/api/chat", "/api/generate", "/api/show", "/api/embed", "/api/pull"):
        status, text = server.request("POST", path, raw=b"{not json")
        j = json.loads(text)
        assert status == 400 and list(j) == ["error"] and isinstance(j["error"], str), (path, text)
        assert "JSON" in j["error"] and "OpenAI" not in j["error"] and "HINT" not in j["error"], (path, text)
    status, text = server.request("POST", "/v1/chat/completions", raw=b"{not json")
    assert status == 400 and "The OpenAI API expects a JSON payload" in json.loads(text)["error"]["message"]
    status, text = server.request("GET", "/api/chat")
    assert status == 405 and "POST" in json.loads(text)["error"]
    status, text = server.request("GET", "/api/nope")
    assert status == 404 and isinstance(json.loads(text)["error"], str)
    # ollama's docs use `curl -d`, which says application/x-www-form-urlencoded.
    status, text = server.request("POST", "/api/generate", {"model": NAME, "prompt": "Hi", "stream": False,
                                                            "options": T0},
                                  headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 200 and json.loads(text)["done"]


EMB_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def test_embed_matches_sentence_transformers(start_server):
    from test_embeddings import cosine, load_fixture, store_dir
    if not (store_dir() / "model.safetensors").exists():
        pytest.skip("%s is not in the store (run scripts/setup)" % EMB_MODEL)
    s = start_server("--model", EMB_MODEL)
    texts, ids, ref = load_fixture()
    pick = [i for i in range(0, len(texts), 5) if texts[i]][:16]
    with ollama.Client(host=s.url) as c:
        r = c.embed(model=EMB_MODEL, input=[texts[i] for i in pick])
        assert r.model == EMB_MODEL and len(r.embeddings) == len(pick)
        assert r.prompt_eval_count == sum(len(ids[i]) for i in pick)
        assert min(cosine(v, ref[i]) for v, i in zip(r.embeddings, pick)) >= 0.9999
        one = c.embeddings(model=EMB_MODEL, prompt=texts[pick[0]])
        assert cosine(one.embedding, ref[pick[0]]) >= 0.9999
        single = c.embed(model=EMB_MODEL, input=texts[pick[0]])
        assert single.embeddings[0] == pytest.approx(one.embedding, abs=1e-6)
        with pytest.raises(ollama.ResponseError) as e:
            c.embed(model=EMB_MODEL, input="x", dimensions=7)
        assert e.value.status_code == 400
        with pytest.raises(ollama.ResponseError) as e:
            c.embed(model=EMB_MODEL, input="word " * 2000, truncate=False)
        assert e.value.status_code == 400 and "truncate" in e.value.error
        long = c.embed(model=EMB_MODEL, input="word " * 2000)  # truncated, as ollama does by default
        assert len(long.embeddings[0]) == 384
        with pytest.raises(ollama.ResponseError) as e:
            c.chat(model=EMB_MODEL, messages=ASK)
        assert e.value.status_code == 400


@pytest.fixture
def hub_server(start_server, tmp_path):
    hub = fake_hub.FakeHub(fake_hub.default_repos())
    cache = tmp_path / "hub-cache"
    env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "hf-home"),
           "HF_HUB_ETAG_TIMEOUT": "5", "HF_HUB_DOWNLOAD_TIMEOUT": "5", "no_proxy": "*", "HF_HUB_OFFLINE": "0"}
    s = start_server("--parallel", "1", "--ctx-size", "256", env=env)
    yield s, hub, cache
    hub.close()


def test_pull_through_the_hub_client(hub_server):
    s, hub, cache = hub_server
    snap = cache / "models--kvad-test--tiny-GGUF" / "snapshots" / hub.repos["kvad-test/tiny-GGUF"].commit
    with ollama.Client(host=s.url) as c:
        lines = list(c.pull("hf.co/kvad-test/tiny-GGUF:Q8_0", stream=True))
        assert lines[0].status == "pulling manifest" and lines[-1].status == "success"
        files = [l for l in lines if l.status == "pulling tiny-Q8_0.gguf"]
        assert files and files[-1].completed == files[-1].total == 1 << 20
        assert (snap / "tiny-Q8_0.gguf").stat().st_size == 1 << 20
        # Not streamed: one object; a second pull finds the file cached.
        assert c.pull("hf.co/kvad-test/tiny-GGUF:Q4_K_M").status == "success"
        assert (snap / "tiny-Q4_K_M.gguf").is_file()
        assert c.pull("kvad-test/tiny-GGUF:Q4_K_M").status == "success"
        # The served model is there already.
        assert c.pull(NAME).status == "success"
        with pytest.raises(ollama.ResponseError) as e:
            c.pull("hf.co/kvad-test/no-such-repo")
        assert e.value.status_code == 404
        with pytest.raises(ollama.ResponseError) as e:
            list(c.pull("hf.co/kvad-test/no-such-repo", stream=True))
        assert "no-such-repo" in e.value.error
        with pytest.raises(ollama.ResponseError) as e:
            c.pull("hf.co/kvad-test/tiny-GGUF:Q2_K")
        assert 400 <= e.value.status_code < 500
