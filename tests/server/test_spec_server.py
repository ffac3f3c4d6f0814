"""Speculative decoding inside kvad serve's continuous batching (--spec-ngram,
--model-draft): concurrent greedy requests give exactly the text a server
without speculation gives, streamed and not; /metrics, the OpenAI usage and
llama.cpp's timings count proposed and accepted tokens; bad flags are
refused before the model loads."""
import concurrent.futures
import json
import os
import subprocess

import pytest

openai = pytest.importorskip("openai", reason="the openai package is missing (run scripts/setup)")

from conftest import MODEL_NAME, model_path  # noqa: E402

# A code edit: the reply repeats most of the prompt, where n-gram lookup hits.
CODE = ("Rename the variables to snake_case.\n\n```python\n"
        "def computeTotal(itemList, taxRate):\n"
        "    totalValue = 0\n"
        "    for itemValue in itemList:\n"
        "        totalValue += itemValue * (1 + taxRate)\n"
        "    return totalValue\n```\n\n```python\n"
        "def compute_total(item_list, tax_rate):\n")
PROMPTS = [
    CODE,
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,",
    "Once upon a time, in a land far away, there lived a",
]
MAX_TOKENS = 32


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def complete(server, prompt, stream=False, **kw):
    """(text, usage) of a greedy /v1/completions request."""
    c = client(server)
    args = dict(model=MODEL_NAME, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, **kw)
    if not stream:
        r = c.completions.create(**args)
        return r.choices[0].text, r.usage
    text, usage = "", None
    for k in c.completions.create(stream=True, stream_options={"include_usage": True}, **args):
        if k.choices:
            text += k.choices[0].text
        if k.usage:
            usage = k.usage
    return text, usage


def concurrently(server, stream):
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as ex:
        return list(ex.map(lambda p: complete(server, p, stream), PROMPTS))


_plain = []  # computed once for the module


@pytest.fixture
def plain_texts(start_server):
    """(text, completion_tokens) of each prompt from a server without speculation, one at a time."""
    if not _plain:
        plain = start_server("--parallel", "4", "--ctx-size", "512")
        _plain.extend((t, u.completion_tokens) for t, u in (complete(plain, p) for p in PROMPTS))
        plain.stop()
    return list(_plain)


@pytest.mark.parametrize("stream", [False, True])
def test_ngram_concurrent_greedy_equals_plain(start_server, plain_texts, stream):
    spec = start_server("--parallel", "4", "--ctx-size", "512", "--spec-ngram", "3", "--draft-max", "8")
    got = concurrently(spec, stream)
    for (text, usage), want, prompt in zip(got, plain_texts, PROMPTS):
        assert (text, usage.completion_tokens) == want, prompt
    # The code edit copies the prompt: lookup proposes and most of it holds.
    code_usage = got[0][1]
    assert code_usage.completion_tokens_details is not None
    assert code_usage.completion_tokens_details.accepted_prediction_tokens > 0
    m = spec.metrics()
    assert m["kvad_spec_accepted_tokens_total"] > 0
    assert m["kvad_spec_draft_tokens_total"] >= m["kvad_spec_accepted_tokens_total"]
    assert m["kvad_spec_verify_steps_total"] > 0
    rate = m["kvad_spec_acceptance_rate"]
    assert rate == pytest.approx(m["kvad_spec_accepted_tokens_total"] / m["kvad_spec_draft_tokens_total"])
    # Every token counted once: the usage of the four is what was generated.
    assert m["kvad_generated_tokens_total"] == sum(u.completion_tokens for _, u in got)


def test_llamacpp_timings_show_draft_counts(start_server):
    spec = start_server("--parallel", "2", "--ctx-size", "512", "--spec-ngram", "3")
    status, body = spec.request("POST", "/completion",
                                {"prompt": CODE, "n_predict": MAX_TOKENS, "temperature": 0})
    assert status == 200, body
    t = json.loads(body)["timings"]
    assert t["draft_n"] > 0
    assert 0 < t["draft_n_accepted"] <= t["draft_n"]


def test_plain_server_has_no_spec_metrics(start_server):
    plain = start_server("--parallel", "2", "--ctx-size", "256")
    text, usage = complete(plain, PROMPTS[0])
    assert usage.completion_tokens_details is None
    assert not any(k.startswith("kvad_spec_") for k in plain.metrics())


def test_ngram_at_temperature_is_reproducible_by_seed(start_server):
    # The rejection rule draws from the request's own random stream, and k
    # follows only its own acceptance: alone, the same seed gives the same
    # text. (Beside other decoding slots k may be capped lower, which
    # changes how the stream is used: the distribution stays the target's,
    # the text need not repeat.)
    spec = start_server("--parallel", "4", "--ctx-size", "512", "--spec-ngram", "3")
    c = client(spec)

    def one(prompt):
        r = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0.8, seed=7)
        return r.choices[0].text, r.usage

    first, u1 = one(CODE)
    again, u2 = one(CODE)
    assert again == first
    assert u1.completion_tokens_details.accepted_prediction_tokens > 0
    assert u2.completion_tokens_details == u1.completion_tokens_details
    assert spec.metrics()["kvad_spec_accepted_tokens_total"] > 0


def test_draft_model_greedy_equals_plain(start_server, plain_texts):
    # The target as its own draft: nearly every greedy proposal is accepted
    # (not all: the draft evaluates the prompt in other batches than the
    # target's slots, and rounding may flip a near-tie).
    spec = start_server("--parallel", "4", "--ctx-size", "512", "--model-draft", model_path(), "--draft-max", "4")
    got = concurrently(spec, False)
    assert [(t, u.completion_tokens) for t, u in got] == plain_texts
    m = spec.metrics()
    assert m["kvad_spec_draft_tokens_total"] > 0
    assert m["kvad_spec_accepted_tokens_total"] >= 0.8 * m["kvad_spec_draft_tokens_total"]


def serve_fails(*args):
    binary = os.environ.get("KVAD_BINARY")
    if not binary or not os.path.exists(binary):
        pytest.skip("KVAD_BINARY not set or missing (run through ctest)")
    r = subprocess.run([binary, "serve", "--model", model_path(), "--port", "0"] + list(args),
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stderr


@pytest.mark.parametrize("flags,needle", [
    (["--draft-max", "0"], "--draft-max"),
    (["--draft-max", "1000000"], "--draft-max"),
    (["--draft-min", "9", "--draft-max", "4", "--spec-ngram", "3"], "--draft-min"),
    (["--spec-ngram", "3", "--model-draft", "x.gguf"], "choose one proposer"),
    (["--spec-ngram", "65"], "--spec-ngram"),
    (["--spec-max-rows", "-1"], "--spec-max-rows"),
])
def test_bad_spec_flags_are_usage_errors(flags, needle):
    if model_path() is None:
        pytest.skip("model %s not installed" % MODEL_NAME)
    rc, err = serve_fails(*flags)
    assert rc == 2, err
    assert needle in err
    assert len(err.strip().splitlines()) == 1, err


def test_draft_with_another_vocabulary_is_refused():
    other = os.path.join(os.path.dirname(model_path() or ""), "gemma3-270m.gguf")
    if model_path() is None or not os.path.isfile(other):
        pytest.skip("smollm2-135m or gemma3-270m not installed")
    rc, err = serve_fails("--model-draft", other)
    assert rc == 1, err
    assert "cannot propose for" in err


def test_ngram_with_a_grammar_equals_plain(start_server):
    # A JSON schema masks each verified position after the accepted ones.
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {
        "type": "object", "properties": {"name": {"type": "string"}, "price": {"type": "integer"}},
        "required": ["name", "price"]}}}, "required": ["items"]}
    msgs = [{"role": "user", "content": "List three fruits with their prices as JSON."}]

    def ask(server):
        r = client(server).chat.completions.create(
            model=MODEL_NAME, messages=msgs, max_tokens=48, temperature=0,
            response_format={"type": "json_schema", "json_schema": {"name": "fruits", "schema": schema}})
        return r.choices[0].message.content, r.usage

    plain = start_server("--parallel", "2", "--ctx-size", "512")
    want, _ = ask(plain)
    spec = start_server("--parallel", "2", "--ctx-size", "512", "--spec-ngram", "2")
    got, usage = ask(spec)
    assert got == want
    assert usage.completion_tokens_details.accepted_prediction_tokens > 0
