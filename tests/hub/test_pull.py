"""kvad pull against the loopback Hub (fake_hub.py): what goes over the wire
and what lands in the HF cache. No network beyond 127.0.0.1."""
import hashlib
import os
import pty
import subprocess

import pytest

import fake_hub
from conftest import STORE_GGUF, error_line, kvad_binary, tree

TINY = "kvad-test/tiny-llama"
GGUF = "kvad-test/tiny-GGUF"
CKPT_FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
              "tokenizer_config.json"]


def check_pointer(env, repo_id, name):
    """snapshots/<commit>/<name> is a relative link to ../../blobs/<etag> holding the file."""
    f = env.hub.repos[repo_id].files[name]
    pointer = os.path.join(env.snapshot(repo_id), name)
    assert os.path.islink(pointer), pointer
    etag = f.sha256 if f.lfs else f.git_oid
    depth = name.count("/")
    assert os.readlink(pointer) == "../" * (2 + depth) + "blobs/" + etag
    with open(pointer, "rb") as fh:
        assert fh.read() == f.data()


def test_pull_checkpoint(env):
    p = env.kvad("pull", TINY)
    assert p.returncode == 0, p.stderr
    snap = env.snapshot(TINY)
    assert p.stdout.strip() == snap
    assert tree(snap) == CKPT_FILES  # not README.md or .gitattributes
    for name in CKPT_FILES:
        check_pointer(env, TINY, name)
    with open(os.path.join(env.repo_dir(TINY), "refs", "main"), "rb") as fh:
        assert fh.read() == env.hub.repos[TINY].commit.encode()  # no newline
    assert not [b for b in os.listdir(os.path.join(env.repo_dir(TINY), "blobs")) if b.endswith(".incomplete")]
    assert os.path.isfile(os.path.join(env.cache, "CACHEDIR.TAG"))
    # The LFS bytes came from the storage host after a redirect; the rest from the Hub.
    cdn = env.hub.entries("cdn", "GET")
    assert len(cdn) == 1 and cdn[0]["status"] == 200
    assert cdn[0]["body_bytes"] == env.hub.repos[TINY].files["model.safetensors"].size
    api = env.hub.entries("hub", "GET")
    assert api[0]["path"] == f"/api/models/{TINY}/revision/main"
    heads = env.hub.entries("hub", "HEAD")
    commit = env.hub.repos[TINY].commit
    assert sorted(e["path"] for e in heads) == sorted(f"/{TINY}/resolve/{commit}/{n}" for n in CKPT_FILES)
    assert all(e["headers"].get("accept-encoding") == "identity" for e in heads)
    assert "done" in p.stderr and "\r" not in p.stderr  # plain lines when not on a terminal


def test_pull_gguf_by_quant_tag(env):
    p = env.kvad("pull", GGUF + ":q4_k_m")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == os.path.join(env.snapshot(GGUF), "tiny-Q4_K_M.gguf")
    assert tree(env.snapshot(GGUF)) == ["tiny-Q4_K_M.gguf"]
    check_pointer(env, GGUF, "tiny-Q4_K_M.gguf")


def test_pull_gguf_default_is_q4_k_m(env):
    p = env.kvad("pull", GGUF)
    assert p.returncode == 0, p.stderr
    assert tree(env.snapshot(GGUF)) == ["tiny-Q4_K_M.gguf"]


def test_pull_split_gguf_fetches_every_part(env):
    p = env.kvad("pull", GGUF + ":Q6_K")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("tiny-Q6_K-00001-of-00002.gguf")
    assert tree(env.snapshot(GGUF)) == ["tiny-Q6_K-00001-of-00002.gguf", "tiny-Q6_K-00002-of-00002.gguf"]
    for name in tree(env.snapshot(GGUF)):
        check_pointer(env, GGUF, name)


def test_pull_one_file_weak_etag(env):
    # The GGUF repo answers regular files with a weak ETag, W/"<sha1>".
    p = env.kvad("pull", GGUF + ":README.md")
    assert p.returncode == 0, p.stderr
    check_pointer(env, GGUF, "README.md")
    head = env.hub.entries("hub", "HEAD")[0]
    assert head["status"] == 200


def test_unknown_quant_lists_what_there_is(env):
    line = error_line(env.kvad("pull", GGUF + ":Q2_K"))
    assert "Q2_K" in line and "Q4_K_M" in line and "Q8_0" in line and "Q6_K" in line
    assert not os.path.exists(env.repo_dir(GGUF))


def test_complete_pull_downloads_nothing_again(env):
    assert env.kvad("pull", TINY).returncode == 0
    env.hub.clear_log()
    p = env.kvad("pull", TINY)
    assert p.returncode == 0, p.stderr
    assert env.hub.entries("cdn") == []
    assert env.hub.entries("hub", "HEAD") == []
    assert [e["path"] for e in env.hub.entries("hub")] == [f"/api/models/{TINY}/revision/main"]
    assert "0 B downloaded" in p.stderr and "in the cache" in p.stderr


def test_blob_present_link_missing_downloads_nothing(env):
    assert env.kvad("pull", TINY).returncode == 0
    os.unlink(os.path.join(env.snapshot(TINY), "model.safetensors"))
    env.hub.clear_log()
    p = env.kvad("pull", TINY)
    assert p.returncode == 0, p.stderr
    assert env.hub.entries("cdn") == []
    check_pointer(env, TINY, "model.safetensors")


def test_resume_after_a_cut_in_the_same_run(env):
    f = env.hub.repos[TINY].files["model.safetensors"]
    env.hub.cut[f.sha256] = [1_000_000, 1]
    p = env.kvad("pull", TINY)
    assert p.returncode == 0, p.stderr
    gets = env.hub.entries("cdn", "GET")
    assert len(gets) == 2
    assert gets[0].get("cut") and "range" not in gets[0]["headers"]
    assert gets[1]["headers"]["range"] == "bytes=1000000-" and gets[1]["status"] == 206
    assert sum(g["body_bytes"] for g in gets) == f.size  # nothing fetched twice
    check_pointer(env, TINY, "model.safetensors")
    assert "resuming" in p.stderr


def test_resume_after_a_cut_across_runs(env):
    f = env.hub.repos[TINY].files["model.safetensors"]
    env.hub.cut[f.sha256] = [100_000, 1000]  # every try is cut
    p = env.kvad("pull", TINY)
    line = error_line(p)
    assert "run the pull again to resume" in line
    gets = env.hub.entries("cdn", "GET")
    assert len(gets) == 5  # bounded tries, each resuming where the last stopped
    assert [g["headers"].get("range") for g in gets] == [None] + [f"bytes={k * 100_000}-" for k in range(1, 5)]
    assert tree(os.path.join(env.repo_dir(TINY), "snapshots")) == []  # nothing linked from a failed pull
    assert not os.path.exists(os.path.join(env.repo_dir(TINY), "refs", "main"))
    part = os.path.join(env.repo_dir(TINY), "blobs", f.sha256 + ".incomplete")
    assert os.path.getsize(part) == 500_000
    env.hub.cut.clear()
    env.hub.clear_log()
    p = env.kvad("pull", TINY)
    assert p.returncode == 0, p.stderr
    gets = env.hub.entries("cdn", "GET")
    assert len(gets) == 1 and gets[0]["headers"]["range"] == "bytes=500000-"
    assert gets[0]["body_bytes"] == f.size - 500_000
    check_pointer(env, TINY, "model.safetensors")
    assert not os.path.exists(part)


def test_gated_repo_without_token(env):
    line = error_line(env.kvad("pull", "kvad-test/gated"))
    assert "gated" in line and "HF_TOKEN" in line and "401" in line
    assert not os.path.exists(env.snapshot("kvad-test/gated"))
    assert all("authorization" not in e["headers"] for e in env.hub.entries())


def test_gated_repo_with_token_never_sends_it_to_the_storage_host(env):
    p = env.kvad("pull", "kvad-test/gated", HF_TOKEN=fake_hub.GOOD_TOKEN)
    assert p.returncode == 0, p.stderr
    check_pointer(env, "kvad-test/gated", "model.safetensors")
    hub_reqs = env.hub.entries("hub")
    assert hub_reqs and all(e["headers"].get("authorization") == "Bearer " + fake_hub.GOOD_TOKEN for e in hub_reqs)
    cdn = env.hub.entries("cdn")
    assert len(cdn) == 1 and "authorization" not in cdn[0]["headers"]


def test_gated_repo_with_the_token_file(env):
    with open(os.path.join(env.hf_home, "token"), "w") as fh:
        fh.write(fake_hub.GOOD_TOKEN + "\n")  # as `hf auth login` writes it, give or take the newline
    p = env.kvad("pull", "kvad-test/gated")
    assert p.returncode == 0, p.stderr


def test_gated_repo_with_a_wrong_token(env):
    line = error_line(env.kvad("pull", "kvad-test/gated", HF_TOKEN="hf_wrong"))
    assert "no access" in line and "403" in line


def test_not_found(env):
    line = error_line(env.kvad("pull", "kvad-test/nope", HF_TOKEN=fake_hub.GOOD_TOKEN))
    assert "kvad-test/nope" in line and "not found" in line and "404" in line
    line = error_line(env.kvad("pull", "kvad-test/nope"))  # anonymous: the Hub says 401
    assert "not found" in line and "private" in line and "401" in line
    line = error_line(env.kvad("pull", TINY + "@v9"))
    assert "revision not found" in line and "404" in line
    line = error_line(env.kvad("pull", TINY + ":nope.json"))
    assert "no file 'nope.json'" in line
    assert not os.path.exists(env.cache) or tree(env.cache) == []


def test_wrong_sha256_is_refused(env):
    repo = "kvad-test/badsha"
    line = error_line(env.kvad("pull", repo))
    f = env.hub.repos[repo].files["model.safetensors"]
    assert "sha256" in line and f.sha256 in line
    assert tree(os.path.join(env.repo_dir(repo), "snapshots")) == []
    blobs = os.listdir(os.path.join(env.repo_dir(repo), "blobs"))
    assert f.sha256 not in blobs and f.sha256 + ".incomplete" not in blobs
    assert not os.path.exists(os.path.join(env.repo_dir(repo), "refs", "main"))


@pytest.mark.parametrize("repo,name", [("kvad-test/hostile-dotdot", "../../escape.safetensors"),
                                       ("kvad-test/hostile-abs", "/tmp/kvad-abs.safetensors")])
def test_hostile_file_name_is_refused(env, repo, name):
    line = error_line(env.kvad("pull", repo))
    assert "refused" in line and name in line
    assert not os.path.exists(env.repo_dir(repo))
    assert env.hub.entries("hub", "HEAD") == [] and env.hub.entries("cdn") == []
    assert not os.path.exists(os.path.join(env.tmp, "escape.safetensors"))


def test_hostile_etag_is_refused(env):
    repo = "kvad-test/hostile-etag"
    line = error_line(env.kvad("pull", repo))
    assert "ETag" in line and "evil" in line
    assert not os.path.exists(os.path.join(env.cache, "evil")) and not os.path.exists(os.path.join(env.tmp, "evil"))
    assert env.hub.entries("cdn") == []


def test_nested_file_gets_a_deeper_link(env):
    p = env.kvad("pull", TINY + ":docs/notes.txt")
    assert p.returncode == 0, p.stderr
    check_pointer(env, TINY, "docs/notes.txt")  # ../../../blobs/<sha1>


def test_renamed_repo_redirect_on_the_hub_keeps_the_token(env):
    p = env.kvad("pull", "kvad-test/old-tiny-llama", HF_TOKEN=fake_hub.GOOD_TOKEN)
    assert p.returncode == 0, p.stderr
    commit = env.hub.repos[TINY].commit
    assert p.stdout.strip() == os.path.join(env.repo_dir("kvad-test/old-tiny-llama"), "snapshots", commit)
    moved = [e for e in env.hub.entries("hub") if e["status"] == 307]
    assert moved and all(e["headers"].get("authorization") for e in moved)
    followed = [e for e in env.hub.entries("hub") if e["path"].startswith(("/api/models/" + TINY, "/" + TINY))]
    assert followed and all(e["headers"].get("authorization") == "Bearer " + fake_hub.GOOD_TOKEN for e in followed)
    assert all("authorization" not in e["headers"] for e in env.hub.entries("cdn"))


def test_two_pulls_at_once_download_each_blob_once(env):
    env.hub.cdn_delay = 0.02  # ~1 s for the 3 MiB file, so the two overlap
    procs = [subprocess.Popen([kvad_binary(), "pull", TINY], env=env.environ(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert outs[0][0] == outs[1][0]
    assert len(env.hub.entries("cdn", "GET")) == 1  # the second waited on the lock and found the blob
    check_pointer(env, TINY, "model.safetensors")


def test_network_error(env):
    with socket_closed_port() as port:
        line = error_line(env.kvad("pull", TINY, HF_ENDPOINT=f"http://127.0.0.1:{port}"))
    assert "cannot reach" in line and f"127.0.0.1:{port}" in line


def test_offline(env):
    line = error_line(env.kvad("pull", TINY, HF_HUB_OFFLINE="1"))
    assert "HF_HUB_OFFLINE" in line
    assert env.hub.entries() == []
    assert env.kvad("pull", TINY).returncode == 0
    env.hub.clear_log()
    p = env.kvad("pull", TINY, HF_HUB_OFFLINE="1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == env.snapshot(TINY)
    assert env.hub.entries() == []


def test_progress_bar_on_a_terminal(env):
    master, slave = pty.openpty()
    try:
        proc = subprocess.run([kvad_binary(), "pull", GGUF + ":Q8_0"], env=env.environ(TERM="xterm"),
                              stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, timeout=60)
        os.close(slave)
        slave = None
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        if slave is not None:
            os.close(slave)
        os.close(master)
    assert proc.returncode == 0, out
    text = out.decode(errors="replace")
    assert "\r" in text and "tiny-Q8_0.gguf" in text and "/s" in text and "100%" in text and "MiB" in text


@pytest.mark.skipif(STORE_GGUF is None, reason="the store's smollm2-135m.gguf is not there (scripts/setup)")
def test_run_pulls_a_gguf_repo_then_runs_it_from_the_cache(env):
    model = "kvad-test/SmolLM2-135M-Instruct-GGUF:Q4_1"
    args = ["run", "--model", model, "-p", "Say hi", "-n", "4", "--temp", "0", "-t", "2"]
    p = env.kvad(*args, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "pulling it from " + env.hub.endpoint in p.stderr
    assert p.stdout.strip()
    env.hub.clear_log()
    p = env.kvad(*args, timeout=300, HF_HUB_OFFLINE="1")
    assert p.returncode == 0, p.stderr
    assert "from the HF cache" in p.stderr and env.hub.entries() == []
    line = error_line(env.kvad("run", "--model", TINY, "-p", "x", "-n", "1", HF_HUB_OFFLINE="1"))
    assert "HF_HUB_OFFLINE" in line


def test_run_pulls_a_checkpoint_and_reads_its_safetensors(env):
    # The fake repo's config.json has no model dimensions (and its
    # model.safetensors is random bytes): kvad pulls the checkpoint, opens it
    # through the HF path and names the file and field it cannot use.
    line = error_line(env.kvad("run", "--model", TINY, "-p", "x", "-n", "1"))
    assert "config.json" in line and "missing field" in line, line


class socket_closed_port:
    """A loopback port nothing listens on (bound, then closed)."""

    def __enter__(self):
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        return self.port

    def __exit__(self, *a):
        return False


SDXL = "kvad-test/tiny-sdxl"
# Every file of the fixture pipeline is one a pipeline reads.
SDXL_FILES = [p for p in tree(fake_hub.PIPELINE) if not os.path.isdir(os.path.join(fake_hub.PIPELINE, p))]


def files_of(snapshot):
    return [p for p in tree(snapshot) if not os.path.isdir(os.path.join(snapshot, p))]


def test_pull_diffusers_pipeline(env):
    """Only what a pipeline reads: model_index.json, each component's config, tokenizer files and
    weights; not the safety checker, ONNX or .bin files, other VAEs or the root single file."""
    p = env.kvad("pull", SDXL)
    assert p.returncode == 0, p.stderr
    snap = env.snapshot(SDXL)
    assert p.stdout.strip() == snap
    assert files_of(snap) == SDXL_FILES
    for name in SDXL_FILES:
        check_pointer(env, SDXL, name)


def test_pull_diffusers_pipeline_variant(env):
    """:fp16 takes each component's fp16 file where it has one and its plain file elsewhere."""
    p = env.kvad("pull", SDXL + ":fp16")
    assert p.returncode == 0, p.stderr
    want = sorted(f.replace("unet/diffusion_pytorch_model.safetensors", "unet/diffusion_pytorch_model.fp16.safetensors")
                  for f in SDXL_FILES)
    assert files_of(env.snapshot(SDXL)) == want
    assert "without weights of variant 'bf16'" in error_line(env.kvad("pull", SDXL + ":bf16"))
