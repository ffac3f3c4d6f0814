"""Bad requests get OpenAI-style errors with the right status and the server
keeps serving; clients that disconnect free their slot; the queue bound; auth;
shutdown; metrics."""
import json
import socket
import time

import pytest

openai = pytest.importorskip("openai", reason="the openai package is missing (run scripts/setup)")

from conftest import MODEL_NAME  # noqa: E402

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
HI = [{"role": "user", "content": "Hi"}]
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"  # greedy continues it for a long time


def client(server, api_key="none"):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=api_key, max_retries=0)


def expect_error(server, path, body=None, raw=None, status=400, code=None, param=None, method="POST", headers=None):
    got, text = server.request(method, path, body=body, raw=raw, headers=headers)
    assert got == status, text
    err = json.loads(text)["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"]
    if code is not None:
        assert err["code"] == code, err
    if param is not None:
        assert err["param"] == param, err
    return err


def ok(server):
    """The server still answers a real request."""
    r = client(server).completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=1, temperature=0)
    assert r.usage.completion_tokens == 1


def open_stream(server, body, path=CHAT):
    """A raw HTTP/1.1 request on its own socket (to close it mid-stream)."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=120)
    data = json.dumps(body).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data))
    return s


def read_until(s, needle, count=1):
    buf = b""
    while buf.count(needle) < count:
        part = s.recv(65536)
        if not part:
            break
        buf += part
    return buf


# ------------------------------------------------------------------ errors

BAD_BODIES = [
    # (path, body, status, code, param)
    (CHAT, {"model": MODEL_NAME, "messages": "hi"}, 400, "invalid_type", "messages"),
    (CHAT, {"model": MODEL_NAME}, 400, "missing_required_parameter", "messages"),
    (CHAT, {"model": MODEL_NAME, "messages": []}, 400, "invalid_value", "messages"),
    (CHAT, {"messages": HI}, 400, "missing_required_parameter", "model"),
    (CHAT, {"model": 7, "messages": HI}, 400, "invalid_type", "model"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "temperature": "hot"}, 400, "invalid_type", "temperature"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "temperature": 5}, 400, "invalid_value", "temperature"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "top_p": 1.5}, 400, "invalid_value", "top_p"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "max_tokens": -1}, 400, "invalid_value", "max_tokens"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "max_tokens": 1.5}, 400, "invalid_type", "max_tokens"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "max_completion_tokens": "8"}, 400, "invalid_type",
     "max_completion_tokens"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "stop": 5}, 400, "invalid_type", "stop"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "stop": ["a", 1]}, 400, "invalid_type", "stop"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "stream": "yes"}, 400, "invalid_type", "stream"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "seed": "x"}, 400, "invalid_type", "seed"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "presence_penalty": 3}, 400, "invalid_value", "presence_penalty"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "frequency_penalty": []}, 400, "invalid_type", "frequency_penalty"),
    (CHAT, {"model": MODEL_NAME, "messages": [{"role": "wizard", "content": "x"}]}, 400, "invalid_value",
     "messages[0].role"),
    (CHAT, {"model": MODEL_NAME, "messages": [{"role": "user"}]}, 400, "missing_required_parameter",
     "messages[0].content"),
    (CHAT, {"model": MODEL_NAME, "messages": [{"role": "user", "content": 5}]}, 400, "invalid_type",
     "messages[0].content"),
    (CHAT, {"model": MODEL_NAME, "messages": ["hi"]}, 400, "invalid_type", "messages[0]"),
    (CHAT, {"model": MODEL_NAME, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}, 400, "unsupported_value", None),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "n": 17}, 400, "invalid_value", "n"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "n": 0}, 400, "invalid_value", "n"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "logprobs": 3}, 400, "invalid_type", "logprobs"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "tools": [{"type": "function", "function": {"name": "a b"}}]}, 400,
     "invalid_value", "tools[0].function.name"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "tool_choice": "required"}, 400, "invalid_value", "tool_choice"),
    (CHAT, {"model": "gpt-4o", "messages": HI}, 404, "model_not_found", "model"),
    (COMPLETIONS, {"model": MODEL_NAME}, 400, "missing_required_parameter", "prompt"),
    (COMPLETIONS, {"model": MODEL_NAME, "prompt": {"text": "x"}}, 400, "invalid_type", "prompt"),
    (COMPLETIONS, {"model": MODEL_NAME, "prompt": ["a", "b"]}, 400, "unsupported_value", "prompt"),
    (COMPLETIONS, {"model": MODEL_NAME, "prompt": [1, 99999999]}, 400, "invalid_value", "prompt"),
    (COMPLETIONS, {"model": MODEL_NAME, "prompt": "x", "echo": True}, 400, "unsupported_value", "echo"),
    (COMPLETIONS, {"model": MODEL_NAME, "prompt": "x", "best_of": 3}, 400, "unsupported_value", "best_of"),
    (COMPLETIONS, {"model": "nope", "prompt": "x"}, 404, "model_not_found", "model"),
    (COMPLETIONS, {"model": MODEL_NAME, "prompt": "x", "logit_bias": [1]}, 400, "invalid_type", "logit_bias"),
    (COMPLETIONS, {"model": MODEL_NAME, "prompt": "x", "logit_bias": {"a": 1}}, 400, "invalid_value", "logit_bias"),
    (COMPLETIONS, {"model": MODEL_NAME, "prompt": "x", "logit_bias": {"-1": 1}}, 400, "invalid_value", "logit_bias"),
    (COMPLETIONS, {"model": MODEL_NAME, "prompt": "x", "logit_bias": {"5": 101}}, 400, "invalid_value", "logit_bias"),
    (COMPLETIONS, {"model": MODEL_NAME, "prompt": "x", "logit_bias": {"5": "x"}}, 400, "invalid_type", "logit_bias"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "logit_bias": {"99999999": 1}}, 400, "invalid_value", "logit_bias"),
    (CHAT, {"model": MODEL_NAME, "messages": HI, "logit_bias": {str(i): 1 for i in range(1025)}}, 400,
     "invalid_value", "logit_bias"),
]


def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(server):
    expect_error(server, CHAT, raw=b"{bad json", code="invalid_json")
    expect_error(server, CHAT, raw=b"", code="invalid_json")
    expect_error(server, CHAT, raw=b"\xff\xfe not utf-8", code="invalid_json")
    expect_error(server, CHAT, raw=b"[1, 2]", code="invalid_type")
    expect_error(server, COMPLETIONS, raw=b'"a string"', code="invalid_type")
    for path, body, status, code, param in BAD_BODIES:
        expect_error(server, path, body=body, status=status, code=code, param=param)
    expect_error(server, "/v1/nothing", method="GET", status=404, code="unknown_url")
    expect_error(server, CHAT, method="GET", status=405, code="method_not_allowed")
    expect_error(server, "/v1/models/other", method="GET", status=404, code="model_not_found")
    ok(server)
    m = server.metrics()
    assert m['kvad_requests_total{endpoint="/v1/chat/completions",status="400"}'] >= 25
    assert m['kvad_requests_total{endpoint="/v1/completions",status="404"}'] == 1
    assert m["kvad_active_slots"] == 0


def test_openai_client_sees_the_errors(server):
    c = client(server)
    with pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model="gpt-4o", messages=HI, max_tokens=1)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL_NAME, messages=HI, max_tokens=1, n=99)
    assert e.value.code == "invalid_value" and e.value.param == "n"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL_NAME, messages=HI, max_tokens=1, temperature=9, stream=True)
    assert e.value.param == "temperature"


def test_prompt_longer_than_the_context(start_server):
    server = start_server("--parallel", "1", "--ctx-size", "48")
    long_text = "one two three four five six seven eight nine ten " * 10
    c = client(server)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": long_text}], max_tokens=1)
    assert e.value.code == "context_length_exceeded" and e.value.param == "messages"
    assert "48" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=MODEL_NAME, prompt=long_text, max_tokens=1, stream=True)
    assert e.value.code == "context_length_exceeded" and e.value.param == "prompt"
    # Generation that runs into the end of the context stops with "length".
    r = c.completions.create(model=MODEL_NAME, prompt=COUNTING, max_tokens=500, temperature=0)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens + r.usage.completion_tokens == 49  # positions 0..47, plus the last token sampled
    ok(server)


def test_api_key(start_server):
    server = start_server("--parallel", "1", "--ctx-size", "128", "--api-key", "s3cret")
    err = expect_error(server, "/v1/models", method="GET", status=401, code="invalid_api_key")
    assert err["type"] == "invalid_request_error"
    expect_error(server, CHAT, body={"model": MODEL_NAME, "messages": HI}, status=401, code="invalid_api_key")
    expect_error(server, CHAT, body={"model": MODEL_NAME, "messages": HI}, status=401, code="invalid_api_key",
                 headers={"Authorization": "Bearer wrong"})
    with pytest.raises(openai.AuthenticationError) as e:
        client(server, api_key="wrong").models.list()
    assert e.value.status_code == 401
    good = client(server, api_key="s3cret")
    assert good.models.list().data[0].id == MODEL_NAME
    r = good.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=1)
    assert r.usage.completion_tokens == 1
    # Every path but /health needs the key.
    assert server.request("GET", "/health")[0] == 200
    assert server.request("GET", "/metrics")[0] == 401
    assert server.request("GET", "/")[0] == 401
    assert server.request("GET", "/metrics", headers={"Authorization": "Bearer s3cret"})[0] == 200


# ------------------------------------------------------------ disconnects

def test_client_disconnect_mid_stream_frees_the_slot(start_server):
    server = start_server("--parallel", "2", "--ctx-size", "512")
    s = open_stream(server, {"model": MODEL_NAME, "prompt": COUNTING, "max_tokens": 400, "temperature": 0,
                             "stream": True}, path=COMPLETIONS)
    head = read_until(s, b"data: ", count=3)  # a few tokens have streamed
    assert b"200 OK" in head and b"text/event-stream" in head
    assert server.metrics()["kvad_active_slots"] == 1
    s.close()
    server.wait_metric("kvad_active_slots", lambda v: v == 0, timeout=30)
    m = server.wait_metric('kvad_completions_total{finish_reason="cancelled"}', lambda v: v == 1)
    assert m == 1
    assert server.metrics()["kvad_generated_tokens_total"] < 100  # it did not run to max_tokens
    ok(server)


def test_openai_client_closing_a_stream_frees_the_slot(start_server):
    server = start_server("--parallel", "1", "--ctx-size", "512")
    c = client(server)
    stream = c.completions.create(model=MODEL_NAME, prompt=COUNTING, max_tokens=400, temperature=0, stream=True)
    it = iter(stream)
    for _ in range(3):
        next(it)
    stream.close()
    server.wait_metric("kvad_active_slots", lambda v: v == 0, timeout=30)
    ok(server)  # the one slot is free again


def test_client_disconnect_while_waiting_for_a_whole_response(start_server):
    server = start_server("--parallel", "1", "--ctx-size", "512")
    s = open_stream(server, {"model": MODEL_NAME, "prompt": COUNTING, "max_tokens": 400, "temperature": 0},
                    path=COMPLETIONS)
    server.wait_metric("kvad_generated_tokens_total", lambda v: v >= 2)
    s.close()
    server.wait_metric("kvad_active_slots", lambda v: v == 0, timeout=30)
    ok(server)


# ----------------------------------------------------------- queue, shutdown

def test_full_queue_answers_429(start_server):
    server = start_server("--parallel", "1", "--queue", "1", "--ctx-size", "512")
    body = {"model": MODEL_NAME, "prompt": COUNTING, "max_tokens": 400, "temperature": 0, "stream": True}
    a = open_stream(server, body, path=COMPLETIONS)
    server.wait_metric("kvad_active_slots", lambda v: v == 1)
    b = open_stream(server, body, path=COMPLETIONS)
    server.wait_metric("kvad_queue_depth", lambda v: v == 1)
    with pytest.raises(openai.RateLimitError) as e:
        client(server).completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=1)
    assert e.value.status_code == 429 and e.value.code == "rate_limit_exceeded"
    a.close()
    b.close()
    server.wait_metric("kvad_active_slots", lambda v: v == 0, timeout=30)
    server.wait_metric("kvad_queue_depth", lambda v: v == 0, timeout=30)
    ok(server)


def test_sigterm_ends_streams_with_an_error_event(start_server):
    server = start_server("--parallel", "1", "--ctx-size", "512")
    s = open_stream(server, {"model": MODEL_NAME, "prompt": COUNTING, "max_tokens": 400, "temperature": 0,
                             "stream": True}, path=COMPLETIONS)
    read_until(s, b"data: ", count=2)
    t0 = time.time()
    assert server.stop(timeout=30) == 0
    print("stopped in %.2f s" % (time.time() - t0))
    rest = read_until(s, b"0\r\n\r\n")  # the end of the chunked body
    s.close()
    assert b'"server_shutting_down"' in rest
    assert b"[DONE]" not in rest


# ------------------------------------------------------------------ metrics

def test_metrics_page(server):
    c = client(server)
    for _ in range(2):
        c.chat.completions.create(model=MODEL_NAME, messages=HI, max_tokens=2, temperature=0)
    text = server.request("GET", "/metrics")[1]
    for family, kind in [("kvad_requests_total", "counter"), ("kvad_prompt_tokens_total", "counter"),
                         ("kvad_generated_tokens_total", "counter"), ("kvad_cached_tokens_total", "counter"),
                         ("kvad_prefill_tokens_per_second", "gauge"), ("kvad_decode_tokens_per_second", "gauge"),
                         ("kvad_queue_depth", "gauge"), ("kvad_active_slots", "gauge"),
                         ("kvad_kv_cache_bytes_per_token", "gauge")]:
        assert "# TYPE %s %s\n" % (family, kind) in text
    m = server.metrics()
    assert m['kvad_requests_total{endpoint="/v1/chat/completions",status="200"}'] == 2
    assert m["kvad_generated_tokens_total"] == 4
    assert m["kvad_cached_tokens_total"] > 0  # the second request reused the first one's prompt
    assert m["kvad_prompt_tokens_total"] == m["kvad_cached_tokens_total"] + m["kvad_prompt_eval_tokens_total"]
    assert m["kvad_kv_cache_bytes_per_token"] == 23040  # 30 layers x 3 kv heads x 64 dims x (k, v) x f16
    assert m["kvad_decode_tokens_per_second"] > 0 and m["kvad_prefill_tokens_per_second"] > 0
    assert m["kvad_slots"] == 8 and m["kvad_active_slots"] == 0 and m["kvad_queue_depth"] == 0
    assert server.request("GET", "/health") == (200, '{"status":"ok"}')


def test_port_in_use_is_a_one_line_error(start_server):
    import os
    import subprocess
    from conftest import model_path
    server = start_server("--parallel", "1", "--ctx-size", "64")
    r = subprocess.run([os.environ["KVAD_BINARY"], "serve", "--model", model_path(), "--port", str(server.port)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    # The banner (model, slots) may come first; the error is one line, and the last.
    assert r.stderr.strip().splitlines()[-1].startswith("kvad: error: cannot listen on 127.0.0.1:%d" % server.port), r.stderr
    assert r.stderr.count("kvad: error") == 1, r.stderr
    assert server.request("GET", "/health")[0] == 200


def test_a_signal_right_after_listening_stops_the_server(start_server):
    # A signal that lands between bind() and the HTTP loop's start used to be
    # lost (cpp-httplib's stop() does nothing before it listens).
    import signal
    for i in range(5):
        s = start_server("--parallel", "1", "--ctx-size", "256")
        s.proc.send_signal(signal.SIGINT if i % 2 == 0 else signal.SIGTERM)
        assert s.proc.wait(timeout=15) == 0, i
