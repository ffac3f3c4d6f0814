"""Fixtures for the kvad pull tests: a loopback Hub (fake_hub.py) per test,
a fresh HF cache per test, and a runner for the kvad binary with an
environment that can only reach that Hub.

Environment (set by tests/hub/CMakeLists.txt through run_pytest.sh):
  KVAD_BINARY   the kvad executable
"""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_hub  # noqa: E402

STORE_GGUF = None
for _base in (os.environ.get("KVAD_HOME"), os.path.join(os.path.expanduser("~"), ".cache/kvad")):
    if _base and os.path.isfile(os.path.join(_base, "models", "smollm2-135m.gguf")):
        STORE_GGUF = os.path.join(_base, "models", "smollm2-135m.gguf")
        break

# Variables of the caller's environment that would change what kvad (or a
# proxy) does; each test sets what it needs.
_DROP = ("HF_", "HUGGING", "TRANSFORMERS_OFFLINE", "XDG_CACHE_HOME", "http_proxy", "https_proxy", "all_proxy",
         "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "no_proxy", "NO_PROXY")


def kvad_binary():
    b = os.environ.get("KVAD_BINARY")
    if not b or not os.path.exists(b):
        pytest.skip("KVAD_BINARY not set or missing (run through ctest)")
    return b


@pytest.fixture
def hub():
    h = fake_hub.FakeHub(fake_hub.default_repos(STORE_GGUF))
    yield h
    h.close()


class Env:
    """A cache folder and HF_HOME under tmp_path, and kvad runs against `hub`."""

    def __init__(self, tmp_path, hub):
        self.tmp = tmp_path
        self.cache = str(tmp_path / "hub-cache")
        self.hf_home = str(tmp_path / "hf-home")
        os.makedirs(self.hf_home, exist_ok=True)
        self.hub = hub

    def environ(self, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP)}
        env.update(HF_HUB_CACHE=self.cache, HF_HOME=self.hf_home, HF_HUB_ETAG_TIMEOUT="5",
                   HF_HUB_DOWNLOAD_TIMEOUT="5", no_proxy="*")
        if self.hub is not None:
            env["HF_ENDPOINT"] = self.hub.endpoint
        for k, v in extra.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    def kvad(self, *args, timeout=120, **extra):
        return subprocess.run([kvad_binary(), *args], env=self.environ(**extra), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def repo_dir(self, repo_id):
        return os.path.join(self.cache, "models--" + repo_id.replace("/", "--"))

    def snapshot(self, repo_id):
        return os.path.join(self.repo_dir(repo_id), "snapshots", self.hub.repos[repo_id].commit)


@pytest.fixture
def env(tmp_path, hub):
    return Env(tmp_path, hub)


def error_line(proc):
    """The one `kvad: error:` line of a failed run (asserting there is one)."""
    assert proc.returncode != 0, proc.stderr
    errors = [l for l in proc.stderr.splitlines() if l.startswith("kvad: error:")]
    assert len(errors) == 1, proc.stderr
    assert proc.stderr.rstrip("\n").splitlines()[-1] == errors[0], proc.stderr
    return errors[0]


def tree(root):
    """Every path under `root`, relative, sorted ([] when it does not exist)."""
    out = []
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(out)
