"""The HF cache shared with the official client: huggingface_hub (pinned in
scripts/setup) finds every file kvad pulled, with no scan warnings, and kvad
finds (and runs) what huggingface_hub downloaded. Both talk only to the
loopback Hub (fake_hub.py)."""
import os

os.environ.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_IMPLICIT_TOKEN="1",
                  HF_HUB_DISABLE_UPDATE_CHECK="1")
for _k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
    os.environ.pop(_k, None)

import huggingface_hub  # noqa: E402
import pytest  # noqa: E402
from huggingface_hub import hf_hub_download, scan_cache_dir, snapshot_download, try_to_load_from_cache  # noqa: E402

import fake_hub  # noqa: E402
from conftest import STORE_GGUF, tree  # noqa: E402

TINY = "kvad-test/tiny-llama"
GGUF = "kvad-test/tiny-GGUF"
GATED = "kvad-test/gated"


def pulled_files(env, repo):
    return [n for n in tree(env.snapshot(repo)) if os.path.isfile(os.path.join(env.snapshot(repo), n))]


def test_huggingface_hub_finds_every_file_kvad_pulled(env):
    for spec, extra in ((TINY, {}), (TINY + ":docs/notes.txt", {}), (GGUF + ":Q6_K", {}), (GGUF + ":README.md", {}),
                        (GATED, {"HF_TOKEN": fake_hub.GOOD_TOKEN})):
        p = env.kvad("pull", spec, **extra)
        assert p.returncode == 0, p.stderr
    expect = {TINY: ["config.json", "docs/notes.txt", "generation_config.json", "model.safetensors",
                     "tokenizer.json", "tokenizer_config.json"],
              GGUF: ["README.md", "tiny-Q6_K-00001-of-00002.gguf", "tiny-Q6_K-00002-of-00002.gguf"],
              GATED: ["config.json", "model.safetensors", "tokenizer.json"]}
    for repo, names in expect.items():
        assert pulled_files(env, repo) == names
        for name in names:
            path = try_to_load_from_cache(repo, name, cache_dir=env.cache)
            assert path == os.path.join(env.snapshot(repo), name), (repo, name)
            with open(path, "rb") as fh:
                assert fh.read() == env.hub.repos[repo].files[name].data()
            # The same file by the commit hash, and through hf_hub_download offline.
            assert try_to_load_from_cache(repo, name, cache_dir=env.cache,
                                          revision=env.hub.repos[repo].commit) == path
            assert hf_hub_download(repo, name, cache_dir=env.cache, local_files_only=True) == path

    info = scan_cache_dir(env.cache)
    assert info.warnings == []
    assert not info.incomplete_files
    assert {r.repo_id for r in info.repos} == set(expect)
    for r in info.repos:
        assert r.repo_type == "model"
        (rev,) = r.revisions
        assert rev.commit_hash == env.hub.repos[r.repo_id].commit
        assert rev.refs == frozenset({"main"})
        assert sorted(f.file_name for f in rev.files) == sorted(os.path.basename(n) for n in expect[r.repo_id])
        assert r.size_on_disk == sum(env.hub.repos[r.repo_id].files[n].size for n in expect[r.repo_id])

    # Online, the official client takes kvad's files as they are: no bytes again.
    env.hub.clear_log()
    path = hf_hub_download(TINY, "model.safetensors", cache_dir=env.cache, endpoint=env.hub.endpoint, token=False)
    assert path == os.path.join(env.snapshot(TINY), "model.safetensors")
    assert env.hub.entries("cdn") == [] and env.hub.entries("hub", "GET") == []
    assert snapshot_download(TINY, cache_dir=env.cache, local_files_only=True) == env.snapshot(TINY)


def test_refs_of_tags_and_pr_revisions(env):
    for rev in ("main", "v1.0", "refs/pr/1"):
        p = env.kvad("pull", f"{GGUF}@{rev}:Q8_0")
        assert p.returncode == 0, p.stderr
    assert any(e["path"] == f"/api/models/{GGUF}/revision/refs%2Fpr%2F1" for e in env.hub.entries("hub"))
    for rev in ("v1.0", "refs/pr/1"):
        path = try_to_load_from_cache(GGUF, "tiny-Q8_0.gguf", cache_dir=env.cache, revision=rev)
        assert path == os.path.join(env.snapshot(GGUF), "tiny-Q8_0.gguf")
    info = scan_cache_dir(env.cache)
    assert info.warnings == []
    (repo,) = info.repos
    (rev,) = repo.revisions
    assert rev.refs == frozenset({"main", "v1.0", "refs/pr/1"})


def test_scan_after_a_cut_pull_reports_an_incomplete_file_and_no_warning(env):
    f = env.hub.repos[TINY].files["model.safetensors"]
    env.hub.cut[f.sha256] = [100_000, 1000]
    assert env.kvad("pull", TINY).returncode != 0
    info = scan_cache_dir(env.cache)
    assert info.warnings == []
    assert [x.file_path.name for x in info.incomplete_files] == [f.sha256 + ".incomplete"]


def test_kvad_resolves_what_snapshot_download_put(env):
    for repo in (GGUF, TINY):
        d = snapshot_download(repo, cache_dir=env.cache, endpoint=env.hub.endpoint, token=False)
        assert d == env.snapshot(repo)
    cases = [(GGUF + ":Q8_0", "tiny-Q8_0.gguf"), (GGUF, "tiny-Q4_K_M.gguf"),
             (GGUF + ":Q6_K", "tiny-Q6_K-00001-of-00002.gguf"), (GGUF + ":README.md", "README.md"),
             (GGUF + "@" + env.hub.repos[GGUF].commit + ":Q8_0", "tiny-Q8_0.gguf")]
    env.hub.clear_log()
    for spec, name in cases:
        p = env.kvad("pull", spec, HF_HUB_OFFLINE="1")
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == os.path.join(env.snapshot(GGUF), name)
    p = env.kvad("pull", TINY, HF_HUB_OFFLINE="1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == env.snapshot(TINY)
    assert env.hub.entries() == []
    # Online, kvad sees the files are there and fetches nothing.
    p = env.kvad("pull", GGUF + ":Q6_K")
    assert p.returncode == 0, p.stderr
    assert env.hub.entries("cdn") == [] and env.hub.entries("hub", "HEAD") == []
    assert scan_cache_dir(env.cache).warnings == []


def test_kvad_pull_reuses_a_blob_hf_hub_download_fetched(env):
    hf_hub_download(GGUF, "tiny-Q4_K_M.gguf", cache_dir=env.cache, endpoint=env.hub.endpoint, token=False)
    env.hub.clear_log()
    p = env.kvad("pull", GGUF + ":Q4_K_M")
    assert p.returncode == 0, p.stderr
    assert env.hub.entries("cdn") == []
    assert "0 B downloaded" in p.stderr


@pytest.mark.skipif(STORE_GGUF is None, reason="the store's smollm2-135m.gguf is not there (scripts/setup)")
def test_kvad_runs_a_model_snapshot_download_put(env):
    repo = "kvad-test/SmolLM2-135M-Instruct-GGUF"
    snapshot_download(repo, cache_dir=env.cache, endpoint=env.hub.endpoint, token=False)
    env.hub.clear_log()
    p = env.kvad("run", "--model", repo + ":Q4_1", "-p", "Say hi", "-n", "4", "--temp", "0", "-t", "2",
                 timeout=300, HF_HUB_OFFLINE="1")
    assert p.returncode == 0, p.stderr
    assert "from the HF cache" in p.stderr and p.stdout.strip()
    assert env.hub.entries() == []


def test_version_is_the_pinned_one():
    # scripts/setup pins the client these tests were written against.
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "setup")) as fh:
        assert f"huggingface_hub=={huggingface_hub.__version__}" in fh.read()
