"""A loopback stand-in of the Hugging Face Hub for the tests (stdlib only).

Two servers on 127.0.0.1, each on a free port:
  hub  {endpoint}/api/models/{repo}/revision/{rev}   repo info (sha, siblings)
       {endpoint}/api/models/{repo}/tree/{rev}       file listing (snapshot_download)
       {endpoint}/{repo}/resolve/{rev}/{file}        HEAD/GET: a regular file is
           served here (ETag = git blob sha1, Content-Length); an LFS file gets a
           302 to the cdn with X-Linked-Etag (sha256) and X-Linked-Size, as the
           Hub answers
  cdn  /blobs/{sha256}?...                           the LFS bytes, with Range

Every response carries the headers huggingface_hub reads (X-Repo-Commit,
X-Error-Code, X-Error-Message). Every request is logged (server, method,
path, headers, status, body bytes sent) so a test can say what went over the
wire; `cut` makes the cdn drop a connection after N body bytes.

Run alone (`python3 fake_hub.py`) it serves the test repos until ^C.
"""
import hashlib
import http.server
import json
import os
import random
import socket
import threading
import time
import urllib.parse

GOOD_TOKEN = "hf_kvad_test_token"


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class RepoFile:
    """One file of a repo: bytes or a path on disk, LFS or not."""

    def __init__(self, name, data=None, path=None, lfs=False, served=None):
        self.name, self._data, self.path, self.lfs = name, data, path, lfs
        self._served = served  # bytes sent instead of the real ones (a corrupt blob)
        self._sha256 = None

    def data(self):
        if self._data is None:
            with open(self.path, "rb") as f:
                self._data = f.read()
        return self._data

    def served(self):
        return self._served if self._served is not None else self.data()

    @property
    def size(self):
        return len(self.data())

    @property
    def sha256(self):
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(self.data()).hexdigest()
        return self._sha256

    @property
    def git_oid(self):
        if self.lfs:  # the pointer file's blob id, as in git
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n"
            return git_blob_sha1(pointer.encode())
        return git_blob_sha1(self.data())


class Repo:
    def __init__(self, repo_id, files, gated=False, weak_etag=False, extra_names=(), hostile_etag=False):
        self.id = repo_id
        self.files = {f.name: f for f in files}
        self.gated = gated
        self.weak_etag = weak_etag
        self.hostile_etag = hostile_etag  # ETags that are paths, as a malicious server might send
        self.extra_names = list(extra_names)  # listed in siblings, never served (hostile names)
        self.commit = hashlib.sha1(("commit:" + repo_id).encode()).hexdigest()

    def siblings(self):
        return sorted(self.files) + self.extra_names


def _rand(seed, n):
    return random.Random(seed).randbytes(n)


PIPELINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "image_pipelines", "sdxl")


def pipeline_files():
    """The tiny SDXL pipeline of tests/fixtures/image_pipelines as a diffusers repo, with what such
    repos carry beside it that a pipeline does not need: the safety checker's and ONNX exports'
    folders, .bin copies, a single-file checkpoint at the root, and an fp16 variant of the UNet."""
    files = []
    for d, _, names in os.walk(PIPELINE):
        for n in names:
            rel = os.path.relpath(os.path.join(d, n), PIPELINE).replace(os.sep, "/")
            files.append(RepoFile(rel, path=os.path.join(d, n), lfs=n.endswith(".safetensors")))
    files += [
        RepoFile("README.md", b"# tiny-sdxl\n"),
        RepoFile("sd_xl_base_1.0.safetensors", _rand(20, 5000), lfs=True),
        RepoFile("unet/diffusion_pytorch_model.fp16.safetensors", _rand(21, 4000), lfs=True),
        RepoFile("unet/diffusion_pytorch_model.bin", _rand(22, 3000), lfs=True),
        RepoFile("safety_checker/config.json", b"{}"),
        RepoFile("safety_checker/model.safetensors", _rand(23, 3000), lfs=True),
        RepoFile("feature_extractor/preprocessor_config.json", b"{}"),
        RepoFile("vae_decoder/model.onnx", _rand(24, 3000), lfs=True),
        RepoFile("vae_1_0/diffusion_pytorch_model.safetensors", _rand(25, 3000), lfs=True),
    ]
    return files


def default_repos(store_gguf=None):
    """The repos the tests use. `store_gguf`: a real GGUF to serve as
    kvad-test/SmolLM2-135M-Instruct-GGUF (Q4_1), or None."""
    cfg = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64}).encode()
    gen = json.dumps({"bos_token_id": 1, "eos_token_id": 2}).encode()
    tok = json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}).encode()
    tok_cfg = json.dumps({"bos_token": "<s>", "eos_token": "</s>"}).encode()
    gguf = lambda seed, n: b"GGUF" + _rand(seed, n - 4)
    repos = [
        Repo("kvad-test/tiny-llama", [
            RepoFile(".gitattributes", b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"),
            RepoFile("README.md", b"# tiny-llama\nA test repo.\n"),
            RepoFile("config.json", cfg),
            RepoFile("generation_config.json", gen),
            RepoFile("tokenizer.json", tok),
            RepoFile("tokenizer_config.json", tok_cfg),
            RepoFile("model.safetensors", _rand(1, 3 << 20), lfs=True),
            RepoFile("docs/notes.txt", b"not part of the model\n"),
        ]),
        Repo("kvad-test/tiny-GGUF", [
            RepoFile("README.md", b"# tiny-GGUF\n"),
            RepoFile("tiny-Q4_K_M.gguf", gguf(2, 1 << 20), lfs=True),
            RepoFile("tiny-Q8_0.gguf", gguf(3, 1 << 20), lfs=True),
            RepoFile("mmproj-tiny-Q8_0.gguf", gguf(4, 4096), lfs=True),
            RepoFile("tiny-Q6_K-00001-of-00002.gguf", gguf(5, 300_000), lfs=True),
            RepoFile("tiny-Q6_K-00002-of-00002.gguf", gguf(6, 200_000), lfs=True),
        ], weak_etag=True),
        Repo("kvad-test/gated", [
            RepoFile("config.json", cfg),
            RepoFile("tokenizer.json", tok),
            RepoFile("model.safetensors", _rand(7, 100_000), lfs=True),
        ], gated=True),
        Repo("kvad-test/badsha", [
            RepoFile("config.json", cfg),
            RepoFile("model.safetensors", _rand(8, 200_000), lfs=True, served=_rand(9, 200_000)),
        ]),
        Repo("kvad-test/hostile-dotdot", [RepoFile("config.json", cfg)],
             extra_names=["../../escape.safetensors"]),
        Repo("kvad-test/hostile-abs", [RepoFile("config.json", cfg)], extra_names=["/tmp/kvad-abs.safetensors"]),
        Repo("kvad-test/hostile-etag", [RepoFile("config.json", cfg),
                                        RepoFile("model.safetensors", _rand(10, 1000), lfs=True)],
             hostile_etag=True),
    ]
    repos.append(Repo("kvad-test/tiny-sdxl", pipeline_files()))
    if store_gguf:
        repos.append(Repo("kvad-test/SmolLM2-135M-Instruct-GGUF", [
            RepoFile("README.md", b"# SmolLM2-135M-Instruct, Q4_1\n"),
            RepoFile("SmolLM2-135M-Instruct-Q4_1.gguf", path=store_gguf, lfs=True),
        ]))
    return {r.id: r for r in repos}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class FakeHub:
    """hub and cdn servers on 127.0.0.1; .endpoint is the hub's URL."""

    def __init__(self, repos):
        self.repos = repos
        self.log = []
        self.cut = {}  # sha256 -> [body bytes to send before dropping the connection, times left]
        self.renamed = {"kvad-test/old-tiny-llama": "kvad-test/tiny-llama"}  # answered with a relative 307
        self.cdn_delay = 0.0  # seconds between 64 KiB chunks of a cdn body (a slow link)
        self._lock = threading.Lock()
        self._in_flight = 0  # requests being answered; their log entries are still to come
        self._hub = _Server(("127.0.0.1", 0), self._handler("hub"))
        self._cdn = _Server(("127.0.0.1", 0), self._handler("cdn"))
        self.endpoint = "http://127.0.0.1:%d" % self._hub.server_address[1]
        self.cdn_url = "http://127.0.0.1:%d" % self._cdn.server_address[1]
        self._threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
                         for s in (self._hub, self._cdn)]
        for t in self._threads:
            t.start()

    def close(self):
        for s in (self._hub, self._cdn):
            s.shutdown()
            s.server_close()
        for t in self._threads:
            t.join(timeout=5)

    def settle(self, timeout=5.0):
        """Waits (bounded) until every request a client has seen answered is in the log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._in_flight == 0:
                    return
            time.sleep(0.01)

    def clear_log(self):
        self.settle()
        with self._lock:
            self.log.clear()

    def entries(self, server=None, method=None):
        self.settle()
        with self._lock:
            return [e for e in self.log
                    if (server is None or e["server"] == server) and (method is None or e["method"] == method)]

    def _record(self, entry):
        with self._lock:
            self.log.append(entry)
            self._in_flight -= 1

    def _handler(self, which):
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 10  # a stuck client is dropped, never waited on forever

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self._dispatch("HEAD")

            def do_GET(self):
                self._dispatch("GET")

            def _dispatch(self, method):
                self._entry = {"server": which, "method": method, "path": self.path,
                               "headers": {k.lower(): v for k, v in self.headers.items()},
                               "status": None, "body_bytes": 0}
                with hub._lock:
                    hub._in_flight += 1
                try:
                    if which == "hub":
                        hub._serve_hub(self, method)
                    else:
                        hub._serve_cdn(self, method)
                finally:
                    hub._record(self._entry)

            def reply(self, status, headers=None, body=b"", send_body=True, cut_after=None, delay=0.0):
                self._entry["status"] = status
                self.send_response(status)
                headers = dict(headers or {})
                headers.setdefault("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if not send_body:
                    return
                if cut_after is not None:
                    self.wfile.write(body[:cut_after])
                    self.wfile.flush()
                    self._entry["body_bytes"] = min(cut_after, len(body))
                    self._entry["cut"] = True
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                if delay:
                    for k in range(0, len(body), 65536):
                        self.wfile.write(body[k:k + 65536])
                        self.wfile.flush()
                        time.sleep(delay)
                else:
                    self.wfile.write(body)
                self._entry["body_bytes"] = len(body)

            def error(self, status, code, message, commit=None, send_body=True):
                headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
                if commit:
                    headers["X-Repo-Commit"] = commit
                self.reply(status, headers, json.dumps({"error": message}).encode(), send_body)

        return Handler

    # --- hub -------------------------------------------------------------

    def _auth(self, h):
        return h.headers.get("Authorization", "")

    def _find_repo(self, h, parts, send_body):
        """parts[0:2] is org/name; answers 401/404 as the Hub does and returns None."""
        if len(parts) < 2:
            h.error(404, "RepoNotFound", "Repository not found", send_body=send_body)
            return None
        repo = self.repos.get(parts[0] + "/" + parts[1])
        if repo is None:
            # Anonymous: 401 (it might be private); with a token: 404.
            status = 404 if self._auth(h) else 401
            h.error(status, "RepoNotFound", "Repository not found", send_body=send_body)
        return repo

    def _commit_of(self, h, repo, rev, send_body):
        if rev in ("main", "v1.0", "refs/pr/1", repo.commit):  # a tag and a PR ref, all at the one commit
            return repo.commit
        h.error(404, "RevisionNotFound", f"Invalid rev id: {rev}", send_body=send_body)
        return None

    def _serve_hub(self, h, method):
        url = urllib.parse.urlsplit(h.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        send_body = method == "GET"
        for old, new in self.renamed.items():
            for prefix in ("/api/models/" + old + "/", "/" + old + "/resolve/"):
                if url.path.startswith(prefix):
                    loc = prefix.replace(old, new) + url.path[len(prefix):]
                    h.reply(307, {"Location": loc, "Content-Type": "text/plain"}, b"Moved", send_body)
                    return
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
            repo = self._find_repo(h, parts[2:4], send_body)
            if repo is None:
                return
            commit = self._commit_of(h, repo, parts[5], send_body)
            if commit is None:
                return
            if parts[4] == "revision":
                body = {"_id": "0" * 24, "id": repo.id, "modelId": repo.id, "sha": commit, "private": False,
                        "gated": "auto" if repo.gated else False, "disabled": False, "downloads": 0, "likes": 0,
                        "tags": [], "lastModified": "2025-01-01T00:00:00.000Z",
                        "siblings": [{"rfilename": n} for n in repo.siblings()]}
            else:
                body, dirs = [], set()
                for f in sorted(repo.files.values(), key=lambda f: f.name):
                    d = os.path.dirname(f.name)
                    while d and d not in dirs:
                        dirs.add(d)
                        body.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": d})
                        d = os.path.dirname(d)
                    e = {"type": "file", "oid": f.git_oid, "size": f.size, "path": f.name}
                    if f.lfs:
                        e["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
                    body.append(e)
            h.reply(200, {"Content-Type": "application/json"}, json.dumps(body).encode(), send_body)
            return
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = self._find_repo(h, parts[:2], send_body)
            if repo is None:
                return
            commit = self._commit_of(h, repo, parts[3], send_body)
            if commit is None:
                return
            name = "/".join(parts[4:])
            f = repo.files.get(name)
            if f is None:
                h.error(404, "EntryNotFound", f"{name} does not exist on \"{parts[3]}\"", commit, send_body)
                return
            if repo.gated:
                auth = self._auth(h)
                if not auth:
                    h.error(401, "GatedRepo", f"Access to model {repo.id} is restricted. You must have access "
                            "to it and be authenticated to access it. Please log in.", commit, send_body)
                    return
                if auth != "Bearer " + GOOD_TOKEN:
                    h.error(403, "GatedRepo", f"Access to model {repo.id} is restricted and you are not in the "
                            "authorized list.", commit, send_body)
                    return
            if f.lfs:
                loc = f"{self.cdn_url}/blobs/{f.sha256}?repo={urllib.parse.quote(repo.id, safe='')}&X-Sig=abc"
                linked = '"../../../../evil"' if repo.hostile_etag else f'"{f.sha256}"'
                h.reply(302, {"Location": loc, "X-Repo-Commit": commit, "ETag": f'"{f.git_oid}"',
                              "X-Linked-Etag": linked, "X-Linked-Size": str(f.size)}, b"", send_body)
                return
            etag = f'W/"{f.git_oid}"' if repo.weak_etag else f'"{f.git_oid}"'
            if repo.hostile_etag:
                etag = '"../../evil"'
            self._send_bytes(h, f.served(), {"X-Repo-Commit": commit, "ETag": etag}, send_body, None)
            return
        h.error(404, "NotFound", "no such route", send_body=send_body)

    # --- cdn -------------------------------------------------------------

    def _serve_cdn(self, h, method):
        url = urllib.parse.urlsplit(h.path)
        parts = url.path.split("/")[1:]
        blob = None
        if len(parts) == 2 and parts[0] == "blobs":
            for repo in self.repos.values():
                for f in repo.files.values():
                    if f.lfs and f.sha256 == parts[1]:
                        blob = f
        if blob is None:
            h.reply(404, {"Content-Type": "text/plain"}, b"NoSuchKey", method == "GET")
            return
        cut_after = None
        with self._lock:
            c = self.cut.get(blob.sha256)
            if c and c[1] > 0 and method == "GET":
                c[1] -= 1
                cut_after = c[0]
        self._send_bytes(h, blob.served(), {"ETag": f'"{blob.sha256}"'}, method == "GET", cut_after, self.cdn_delay)

    def _send_bytes(self, h, data, headers, send_body, cut_after, delay=0.0):
        headers = dict(headers, **{"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"})
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(data):
                h.reply(416, dict(headers, **{"Content-Range": f"bytes */{len(data)}"}), b"", send_body)
                return
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            h.reply(206, headers, data[start:], send_body, cut_after, delay)
            return
        h.reply(200, headers, data, send_body, cut_after, delay)


def main():
    store = os.path.expanduser("~/.cache/kvad/models/smollm2-135m.gguf")
    hub = FakeHub(default_repos(store if os.path.isfile(store) else None))
    print(f"HF_ENDPOINT={hub.endpoint}  (cdn {hub.cdn_url}); token {GOOD_TOKEN}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        hub.close()


if __name__ == "__main__":
    main()
