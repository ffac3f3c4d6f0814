"""OpenAI's `n`: several choices of one request, through the official
`openai` client. The prompt is evaluated once (Scheduler::submit_n copies it
into the other choices' slots: the metrics count it once); choice i samples
with seed + i, so each is reproducible on its own."""
import re
import urllib.request

import pytest

openai = pytest.importorskip("openai", reason="the openai package is missing (run scripts/setup)")

from conftest import MODEL_NAME  # noqa: E402

MSG = [{"role": "user", "content": "Write one sentence about the sea."}]


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def prompt_eval_total(server):
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    return float(re.search(r"^kvad_prompt_eval_tokens_total (\S+)", text, re.M).group(1))


def test_n_greedy_choices_are_equal_and_the_prompt_is_evaluated_once(server):
    c = client(server)
    # A prompt no slot holds yet.
    msg = [{"role": "user", "content": "Write one sentence about the mountains."}]
    before = prompt_eval_total(server)
    r = c.chat.completions.create(model=MODEL_NAME, messages=msg, max_tokens=8, temperature=0, n=3)
    evaluated = prompt_eval_total(server) - before
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    texts = {ch.message.content for ch in r.choices}
    assert len(texts) == 1 and texts != {""}
    assert r.usage.completion_tokens == sum(8 for _ in r.choices)
    # The prompt once, plus the last prompt token of each other choice.
    assert evaluated == r.usage.prompt_tokens + 2


def test_n_sampled_choices_follow_seed_plus_index(server):
    c = client(server)
    kw = dict(model=MODEL_NAME, messages=MSG, max_tokens=10, temperature=1.0, seed=77)
    r = c.chat.completions.create(n=3, **kw)
    got = [ch.message.content for ch in r.choices]
    assert len(set(got)) > 1  # three draws of 10 tokens at temperature 1
    for i in range(3):
        alone = c.chat.completions.create(**{**kw, "seed": 77 + i}).choices[0].message.content
        assert alone == got[i], i


def test_n_streamed_equals_not_streamed(server):
    c = client(server)
    kw = dict(model=MODEL_NAME, prompt="Once upon a time", max_tokens=6, temperature=1.0, seed=5, n=3, logprobs=1)
    whole = c.completions.create(**kw)
    parts = {0: "", 1: "", 2: ""}
    finish = {}
    usage = None
    for ch in c.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if ch.usage:
            usage = ch.usage
        for choice in ch.choices:
            parts[choice.index] += choice.text
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    assert [parts[i] for i in range(3)] == [ch.text for ch in whole.choices]
    assert finish == {0: "length", 1: "length", 2: "length"}
    assert usage.completion_tokens == 18 and usage.prompt_tokens == whole.usage.prompt_tokens
    for ch in whole.choices:
        assert "".join(ch.logprobs.tokens) == ch.text


def test_n_larger_than_the_queue_is_429(start_server):
    s = start_server("--parallel", "1", "--queue", "2")
    with pytest.raises(openai.RateLimitError):
        client(s).chat.completions.create(model=MODEL_NAME, messages=MSG, max_tokens=2, n=4)
