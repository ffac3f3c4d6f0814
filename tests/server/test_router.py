"""Two kvad servers behind sglang-router (PyPI), the router that SGLang
ships and that routes to any OpenAI-compatible backend: it registers both
(probing /health and the model-info routes), and with --policy cache_aware
sends the second request of a long shared prefix to the server that
already holds that prefix (usage.prompt_tokens_details.cached_tokens > 0),
where round_robin sends it to the other one (cached 0 but the chat
template's few first tokens).

The router comes from its own venv (${KVAD_HOME:-~/.cache/kvad}/router-venv,
made by scripts/setup); the test skips without it.
"""
import json
import os
import subprocess
import time
import urllib.request
import uuid

import pytest

from conftest import MODEL_NAME, free_port

ROUTER_PY = os.path.join(os.environ.get("KVAD_HOME") or os.path.expanduser("~/.cache/kvad"), "router-venv", "bin",
                         "python")


def router_available():
    if not os.path.exists(ROUTER_PY):
        return False
    return subprocess.run([ROUTER_PY, "-c", "import sglang_router"], capture_output=True).returncode == 0


def post(url, body, timeout=120):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class Router:
    def __init__(self, workers, policy, log_path):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [ROUTER_PY, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(self.port),
             "--policy", policy, "--worker-urls"] + [w.url for w in workers],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            assert self.proc.poll() is None, "the router exited: " + open(log_path).read()[-2000:]
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=5) as r:
                    if r.status == 200 and MODEL_NAME in r.read().decode():
                        return
            except Exception:
                pass
            time.sleep(0.5)
        raise AssertionError("the router did not list the model within 60 s")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def cached_tokens_of_two(router):
    """Two requests, one after the other, with the same long system prompt
    (fresh for this call) and different questions: each one's cached_tokens."""
    prefix = ("You are assistant %s and you answer briefly. " % uuid.uuid4().hex) * 12
    out = []
    for q in ("What is 2+2?", "Name a colour."):
        r = post(router.url + "/v1/chat/completions",
                 {"model": MODEL_NAME, "temperature": 0, "max_tokens": 2,
                  "messages": [{"role": "system", "content": prefix}, {"role": "user", "content": q}]})
        assert r["usage"]["prompt_tokens"] > 150
        out.append(r["usage"]["prompt_tokens_details"]["cached_tokens"])
    return out


def test_router_model_info_routes(server):
    info = json.loads(server.request("GET", "/get_model_info")[1])
    assert info["model_path"] == MODEL_NAME and info["is_generation"] is True
    s = json.loads(server.request("GET", "/get_server_info")[1])
    assert s["max_running_requests"] == 8 and s["context_length"] == 512
    m = server.metrics()
    assert "kvad_kv_cache_used_tokens" in m and 0 <= m["kvad_kv_cache_usage_ratio"] <= 1


@pytest.mark.skipif(not router_available(), reason="no sglang-router venv (run scripts/setup)")
def test_two_servers_behind_sglang_router(start_server, tmp_path):
    workers = [start_server("--parallel", "2", "--ctx-size", "1024") for _ in range(2)]
    results = {}
    for policy in ("cache_aware", "round_robin"):
        router = Router(workers, policy, str(tmp_path / ("router-%s.log" % policy)))
        try:
            results[policy] = cached_tokens_of_two(router)
        finally:
            router.stop()
    aware, rr = results["cache_aware"], results["round_robin"]
    print("cached_tokens, first and second request: cache_aware %s, round_robin %s" % (aware, rr))
    assert aware[0] < 50 and rr[0] < 50  # a fresh prefix: nothing of it cached yet
    assert aware[1] > 150  # the second request found its prefix on the same server
    assert rr[1] < 50      # round robin sent it to the other server
    # Both servers answered under round robin, and the load shows in /metrics.
    for w in workers:
        assert w.metrics().get('kvad_requests_total{endpoint="/v1/chat/completions",status="200"}', 0) >= 1
        assert w.metrics()["kvad_kv_cache_used_tokens"] > 0
