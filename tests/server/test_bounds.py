"""Client input the server must bound, against the real `kvad serve`: JSON
objects of 10^6 keys on every text endpoint (parsed in linear time; the
answer comes before a held deadline the quadratic parse missed by minutes),
a SIGTERM while such bodies are parsed ends the process, integer schema
bounds beyond 2^53 enforced exactly (outputs validated by `jsonschema`,
which compares Python's exact integers), grammars too ambiguous for the
matcher and chat on a model without a template answer 4xx naming no server
path, and /v1/embeddings stops when its client leaves and bounds its queue
(429 with Retry-After)."""
import concurrent.futures
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

openai = pytest.importorskip("openai", reason="the openai package is missing (run scripts/setup)")
jsonschema = pytest.importorskip("jsonschema", reason="the jsonschema package is missing (run scripts/setup)")

from conftest import MODEL_NAME, model_path  # noqa: E402

CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "Hi"}]
# A held connection's deadline: each answer below comes long before it (the
# quadratic parse of 10^6 keys took more than 300 s), so a miss is a failure.
DEADLINE_S = 120


def many_keys(n):
    return "{" + ",".join('"%d":0' % i for i in range(n)) + "}"


def post_raw(server, path, body, timeout=DEADLINE_S):
    """POSTs `body` (bytes) on a fresh connection; returns (status, headers, JSON or text)."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    s.sendall(("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\nConnection: close\r\n\r\n" % (path, len(body))).encode() + body)
    buf = b""
    while True:
        part = s.recv(1 << 16)  # socket.timeout past the deadline fails the test
        if not part:
            break
        buf += part
    s.close()
    head, _, payload = buf.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
    text = payload.decode(errors="replace")
    try:
        return int(lines[0].split()[1]), headers, json.loads(text)
    except ValueError:
        return int(lines[0].split()[1]), headers, text


def assert_no_path(message, *paths):
    for p in paths + (str(Path.home()), ".gguf", "/models/"):
        assert p not in message, message


def validate(text, schema):
    value = json.loads(text)
    jsonschema.Draft202012Validator(schema).validate(value)
    return value


@pytest.fixture
def one_slot(start_server):
    return start_server("--parallel", "2", "--ctx-size", "512")


# ------------------------------------------------------------ 10^6 keys

def test_objects_of_a_million_keys_on_every_endpoint(one_slot):
    big = many_keys(10 ** 6)
    assert 10 << 20 < len(big) < 16 << 20
    bodies = [
        (CHAT, '{"model": "%s", "messages": %s, "max_tokens": 1, "x": %s}' % (MODEL_NAME, json.dumps(MSGS), big)),
        ("/v1/completions", '{"model": "%s", "prompt": "Hi", "max_tokens": 1, "metadata": %s}' % (MODEL_NAME, big)),
        ("/v1/messages", '{"model": "%s", "messages": %s, "max_tokens": 1, "x": %s}' % (MODEL_NAME, json.dumps(MSGS), big)),
        ("/v1/responses", '{"model": "%s", "input": "Hi", "max_output_tokens": 1, "metadata": %s}' % (MODEL_NAME, big)),
    ]
    for path, body in bodies:
        st, _, j = post_raw(one_slot, path, body.encode())
        assert st == 200, (path, j)
    # logit_bias of 10^6 entries: parsed, then refused by its cap.
    st, _, j = post_raw(one_slot, CHAT, ('{"model": "%s", "messages": %s, "logit_bias": %s}' %
                                          (MODEL_NAME, json.dumps(MSGS), big)).encode())
    assert st == 400 and j["error"]["param"] == "logit_bias", j
    # A schema's $defs of 10^5 entries, one referenced: the output validates.
    defs = {"d%d" % i: {"type": "integer", "minimum": 0, "maximum": 9} for i in range(10 ** 5)}
    schema = {"$defs": defs, "type": "object", "properties": {"n": {"$ref": "#/$defs/d99999"}},
              "required": ["n"], "additionalProperties": False}
    body = {"model": MODEL_NAME, "messages": MSGS, "max_tokens": 48, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}}
    st, _, j = post_raw(one_slot, CHAT, json.dumps(body).encode())
    assert st == 200, j
    assert j["choices"][0]["finish_reason"] == "stop", j
    validate(j["choices"][0]["message"]["content"], schema)
    assert one_slot.request("GET", "/health")[0] == 200


def test_sigterm_while_parsing_huge_objects_ends_the_process(start_server):
    s = start_server("--parallel", "2", "--ctx-size", "512")
    body = ('{"model": "%s", "messages": %s, "max_tokens": 1, "x": [%s]}' %
            (MODEL_NAME, json.dumps(MSGS), ",".join([many_keys(2 * 10 ** 5)] * 5))).encode()
    socks = []
    for _ in range(4):  # four handlers parsing at once
        c = socket.create_connection(("127.0.0.1", s.port), timeout=DEADLINE_S)
        c.sendall(("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   "Content-Length: %d\r\n\r\n" % (CHAT, len(body))).encode() + body)
        socks.append(c)
    s.proc.send_signal(signal.SIGTERM)
    # The process ends (the grace for running handlers is 10 s); a hang is
    # a TimeoutExpired here.
    rc = s.proc.wait(timeout=60)
    assert rc in (0, 128 + signal.SIGTERM), rc
    for c in socks:
        c.close()


# ------------------------------------------------------------ exact bounds

BOUND_CASES = [
    {"type": "integer", "minimum": 100000000000000001, "maximum": 100000000000000001},
    {"type": "integer", "minimum": 9007199254740993, "maximum": 9007199254740999},
    {"type": "integer", "exclusiveMinimum": 9007199254740992, "minimum": 9007199254740993,
     "exclusiveMaximum": 9007199254740995},
]


def wrap(n_schema):
    return {"type": "object", "properties": {"n": n_schema}, "required": ["n"], "additionalProperties": False}


@pytest.mark.parametrize("n_schema", BOUND_CASES)
def test_integer_bounds_beyond_2_53_are_exact(one_slot, n_schema):
    c = openai.OpenAI(base_url=one_slot.url + "/v1", api_key="none", max_retries=0, timeout=DEADLINE_S)
    schema = wrap(n_schema)
    try:
        # /v1/chat/completions response_format
        r = c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "A big number:"}],
                                      max_tokens=64, temperature=0, response_format={
                                          "type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
        assert r.choices[0].finish_reason == "stop"
        v = validate(r.choices[0].message.content, schema)
        if n_schema.get("minimum") == n_schema.get("maximum"):
            assert v["n"] == n_schema["minimum"]
        # /v1/responses text.format
        r = c.responses.create(model=MODEL_NAME, input="A big number:", max_output_tokens=64, temperature=0,
                               text={"format": {"type": "json_schema", "name": "n", "schema": schema}})
        assert r.status == "completed"
        validate(r.output_text, schema)
        # tool_choice "required": the arguments
        r = c.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Call f."}], max_tokens=96, temperature=0,
            tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}], tool_choice="required")
        calls = r.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "f"
        validate(calls[0].function.arguments, schema)
    finally:
        c.close()


def test_decimal_bounds_that_double_rounds_are_refused(one_slot):
    # 1.00000000000000001e17 reads as 1e17: refused, naming the bound, rather than enforced weaker.
    raw = ('{"model": "%s", "messages": %s, "response_format": {"type": "json_schema", "json_schema": '
           '{"name": "n", "schema": {"type": "integer", "minimum": 1.00000000000000001e17}}}}' %
           (MODEL_NAME, json.dumps(MSGS))).encode()
    st, _, j = post_raw(one_slot, CHAT, raw)
    assert st == 400 and j["error"]["code"] == "invalid_schema", j
    assert "minimum" in j["error"]["message"] and "2^53" in j["error"]["message"], j
    assert_no_path(j["error"]["message"], model_path())


# ------------------------------------------------------------ 4xx, not 500

def test_schema_that_loops_is_400_naming_its_subschema(one_slot):
    # A pattern that repeats the empty string: the compiled grammar is left
    # recursive. Refused as the schema's error with the JSON pointer of the
    # subschema, on every route a schema reaches (a forced tool call's
    # arguments were a 500 before).
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "(a*)*"}}}
    bodies = [
        (CHAT, {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}},
         "response_format.json_schema.schema"),
        (CHAT, {"tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
                "tool_choice": "required"}, "tools[0].function.parameters"),
    ]
    for path, extra, param in bodies:
        body = {"model": MODEL_NAME, "messages": MSGS, "max_tokens": 4, **extra}
        st, _, j = post_raw(one_slot, path, json.dumps(body).encode())
        assert st == 400 and j["error"]["code"] == "invalid_schema" and j["error"]["param"] == param, j
        assert "keyword 'pattern' at '/properties/x'" in j["error"]["message"], j
    assert one_slot.request("GET", "/health")[0] == 200


def test_grammars_too_ambiguous_are_400(one_slot):
    alts = " | ".join('"w%d"' % i for i in range(5000))
    st, _, j = post_raw(one_slot, CHAT, json.dumps({"model": MODEL_NAME, "messages": MSGS, "max_tokens": 4,
                                                    "grammar": "root ::= " + alts}).encode())
    assert st == 400 and j["error"]["code"] == "invalid_grammar", j
    assert "parse stacks" in j["error"]["message"], j
    assert_no_path(j["error"]["message"], model_path())
    enums = {"anyOf": [{"enum": ["v%d_%d" % (k, i) for i in range(1024)]} for k in range(5)]}
    st, _, j = post_raw(one_slot, CHAT, json.dumps({
        "model": MODEL_NAME, "messages": MSGS, "max_tokens": 4,
        "response_format": {"type": "json_schema", "json_schema": {"name": "e", "schema": enums}}}).encode())
    assert st != 500 and st in (200, 400), j
    if st == 400:
        assert j["error"]["code"] in ("invalid_grammar", "invalid_schema"), j
    assert one_slot.request("GET", "/health")[0] == 200


def gemma_base_path():
    p = Path(model_path() or "").with_name("gemma3-270m.gguf")
    return str(p) if p.is_file() else None


def test_chat_on_a_model_without_template_is_400_naming_no_path(start_server):
    path = gemma_base_path()
    if path is None:
        pytest.skip("gemma3-270m.gguf is not in the store")
    s = start_server("--model", path, "--ctx-size", "256")
    model = "gemma3-270m"
    for p, body in [(CHAT, {"model": model, "messages": MSGS, "max_tokens": 1}),
                    ("/v1/messages", {"model": model, "messages": MSGS, "max_tokens": 1}),
                    ("/v1/responses", {"model": model, "input": "Hi", "max_output_tokens": 1})]:
        st, _, j = post_raw(s, p, json.dumps(body).encode())
        assert st == 400, (p, j)
        msg = j["error"]["message"]
        assert_no_path(msg, path, os.path.dirname(path))
        assert "/v1/completions" in msg, msg
    # Completions still serve it.
    st, _, j = post_raw(s, "/v1/completions", json.dumps({"model": model, "prompt": "Hi", "max_tokens": 1}).encode())
    assert st == 200, j


def test_small_findings(one_slot):
    c = openai.OpenAI(base_url=one_slot.url + "/v1", api_key="none", max_retries=0, timeout=DEADLINE_S)
    try:
        # A tool message answering no call: 400, as OpenAI.
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=MODEL_NAME, max_tokens=1, messages=[
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_9", "content": "r"}])
        assert "call_9" in str(e.value)
        with pytest.raises(openai.BadRequestError):
            c.chat.completions.create(model=MODEL_NAME, max_tokens=1, messages=[
                {"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "call_1", "content": "r"}])
    finally:
        c.close()
    # A NUL in the model's name stays in the message.
    st, _, j = post_raw(one_slot, CHAT, json.dumps({"model": "a\u0000b", "messages": MSGS}).encode())
    assert st == 404 and "a\u0000b" in j["error"]["message"], j
    # Token-id prompts too long are described in tokens.
    st, _, j = post_raw(one_slot, "/v1/completions", json.dumps({"model": MODEL_NAME, "prompt": [1] * 600}).encode())
    assert st == 400 and "600 tokens" in j["error"]["message"] and "0 bytes" not in j["error"]["message"], j
    # Anthropic max_tokens of 2^63 is taken (>= 1), the reply bounded by the context.
    st, _, j = post_raw(one_slot, "/v1/messages", json.dumps({"model": MODEL_NAME, "messages": MSGS,
                                                              "max_tokens": 2 ** 63, "temperature": 0}).encode())
    assert st == 200, j


# ------------------------------------------------------------ embeddings

EMB_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def emb_store():
    home = os.environ.get("KVAD_HOME") or os.path.join(os.environ.get("HOME", "."), ".cache", "kvad")
    return Path(home) / "models" / EMB_MODEL


def start_emb(start_server, *args):
    if not (emb_store() / "model.safetensors").exists():
        pytest.skip("%s is not in the store (run scripts/setup)" % EMB_MODEL)
    return start_server("--model", EMB_MODEL, *args)


# 1170 inputs of 256 ids (just under the 300k-token cap): about 150 forward
# calls of 2048 tokens, minutes on two cores.
BIG = json.dumps({"model": EMB_MODEL, "input": [[1000] * 256] * 1170, "encoding_format": "base64"}).encode()
N_BIG_CALLS = 1170 * 256 // 2048


def send_big(server):
    c = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE_S)
    c.sendall(("POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n" % len(BIG)).encode() + BIG)
    return c


def small_embedding(server):
    return post_raw(server, "/v1/embeddings", json.dumps({"model": EMB_MODEL, "input": "one word"}).encode())


def test_embeddings_stop_when_the_client_leaves(start_server):
    s = start_emb(start_server)
    c = send_big(s)
    s.wait_metric("kvad_embedding_forward_calls_total", lambda v: v >= 1)
    c.close()
    s.wait_metric("kvad_embedding_requests", lambda v: v == 0, timeout=DEADLINE_S)
    # It stopped after a batch or two, not at the end of its inputs.
    assert s.metrics()["kvad_embedding_forward_calls_total"] < N_BIG_CALLS / 4
    st, _, j = small_embedding(s)
    assert st == 200, j


def test_embeddings_take_turns_and_the_queue_is_bounded(start_server):
    s = start_emb(start_server, "--queue", "1")  # one running, one waiting
    a = send_big(s)
    s.wait_metric("kvad_embedding_forward_calls_total", lambda v: v >= 1)
    try:
        # A one-word request beside it answers after a batch or so, not after the big one.
        st, _, j = small_embedding(s)
        assert st == 200, j
        assert s.metrics()["kvad_embedding_forward_calls_total"] < N_BIG_CALLS / 2
        b = send_big(s)
        s.wait_metric("kvad_embedding_requests", lambda v: v == 2)
        st, headers, j = small_embedding(s)
        assert st == 429 and headers.get("retry-after") == "1", (st, headers, j)
        assert j["error"]["type"] == "rate_limit_error", j
        b.close()
    finally:
        a.close()
    s.wait_metric("kvad_embedding_requests", lambda v: v == 0, timeout=DEADLINE_S)
    assert small_embedding(s)[0] == 200
