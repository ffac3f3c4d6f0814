"""Fixtures for the kvad serve tests: each test starts its own server on a
free loopback port (kvad serve --port 0 prints the port it bound) and stops
it with SIGTERM at the end.

Environment (set by tests/server/CMakeLists.txt through run_pytest.sh):
  KVAD_BINARY    the kvad executable
  KVAD_BUILD_DIR where artifacts such as the chat page screenshot go
The model is the store's smollm2-135m ($KVAD_HOME/models or
~/.cache/kvad/models); tests skip when it is absent.
"""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

MODEL_NAME = "smollm2-135m"


def model_path():
    for var in ("KVAD_HOME", "HOME"):
        v = os.environ.get(var)
        if not v:
            continue
        p = os.path.join(v, ".cache/kvad" if var == "HOME" else "", "models", MODEL_NAME + ".gguf")
        if os.path.isfile(p):
            return p
    return None


class Server:
    """A running `kvad serve`; .url is http://127.0.0.1:PORT."""

    def __init__(self, args, log_path, env=None, text_model=True):
        binary = os.environ.get("KVAD_BINARY")
        if not binary or not os.path.exists(binary):
            pytest.skip("KVAD_BINARY not set or missing (run through ctest)")
        # A test may name another model, or serve none (an image model alone).
        model = [] if "--model" in args or not text_model else ["--model", model_path()]
        cmd = [binary, "serve"] + model + ["--port", "0", "-t", "2"] + list(args)
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.PIPE, text=True,
                                     env=None if env is None else {**os.environ, **env})
        self.port = None
        self._lines = []
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.write(line)
            self.log.flush()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("kvad serve did not start; log: " + open(log_path).read())
        # Keep draining stderr (request log lines) so the server never blocks on it.
        self._drain = threading.Thread(target=self._pump, daemon=True)
        self._drain.start()
        self.url = "http://127.0.0.1:%d" % self.port

    def _pump(self):
        for line in self.proc.stderr:
            self.log.write(line)
            self.log.flush()

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join(timeout=5)
        self.log.close()
        return self.proc.returncode

    # --- small HTTP helpers (urllib, no extra packages) ---

    def request(self, method, path, body=None, headers=None, raw=None, timeout=120):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metrics(self):
        status, text = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def wait_metric(self, name, pred, timeout=60):
        deadline = time.time() + timeout
        while True:
            v = self.metrics().get(name)
            if v is not None and pred(v):
                return v
            if time.time() > deadline:
                raise AssertionError("metric %s never satisfied the condition (last: %r)" % (name, v))
            time.sleep(0.1)


@pytest.fixture
def start_server(request, tmp_path):
    """start_server(*args, env=None, text_model=True) -> Server; every server started is
    stopped after the test. `env`: variables added to the server's environment;
    text_model=False: no --model (a server of --image-model alone)."""
    if model_path() is None:
        pytest.skip("model %s not installed (run scripts/setup)" % MODEL_NAME)
    servers = []

    def start(*args, env=None, text_model=True):
        s = Server(args, str(tmp_path / ("server%d.log" % len(servers))), env=env, text_model=text_model)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


@pytest.fixture
def server(start_server):
    """A server with 8 slots of 512 tokens."""
    return start_server("--parallel", "8", "--ctx-size", "512")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
