"""kvad serve driven by the official `openai` Python package: chat and
completions, streamed and not; batched results equal sequential ones."""
import concurrent.futures

import pytest

openai = pytest.importorskip("openai", reason="the openai package is missing (run scripts/setup)")

from conftest import MODEL_NAME  # noqa: E402


def client(server, **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=kw.pop("api_key", "none"), max_retries=0, **kw)


def test_models_lists_the_model(server):
    models = client(server).models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    assert client(server).models.retrieve(MODEL_NAME).id == MODEL_NAME


def test_chat_not_streamed(server):
    # "Answer with one word.": the bare question is a near-tie at the first
    # token for SmolLM2-135M (llama.cpp's own greedy answer starts "L'Étoile").
    c = client(server)
    msgs = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]
    r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=8, temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == MODEL_NAME
    assert len(r.choices) == 1
    ch = r.choices[0]
    assert ch.message.role == "assistant"
    assert "Paris" in ch.message.content
    assert ch.finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 0 and u.completion_tokens > 0
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details.cached_tokens == 0
    # The same conversation again: the prompt comes from the slot's cache
    # (all but its last token), and the answer is the same.
    r2 = c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=8, temperature=0)
    assert r2.choices[0].message.content == ch.message.content
    assert r2.usage.prompt_tokens_details.cached_tokens == u.prompt_tokens - 1


def test_chat_streamed_matches_not_streamed(server):
    c = client(server)
    msgs = [{"role": "system", "content": "You answer in one short sentence."},
            {"role": "user", "content": "Name a primary color."}]
    full = c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=6, temperature=0)
    chunks = list(c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=6, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert all(k.object == "chat.completion.chunk" for k in chunks)
    assert len({k.id for k in chunks}) == 1
    # First chunk: the role. Then content deltas, a chunk with finish_reason,
    # and the usage chunk with no choices.
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
    finals = [k for k in chunks if k.choices and k.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0] is chunks[-2]
    assert finals[0].choices[0].finish_reason == full.choices[0].finish_reason
    text = "".join(k.choices[0].delta.content or "" for k in chunks if k.choices)
    assert text == full.choices[0].message.content
    assert sum(1 for k in chunks if k.choices and k.choices[0].delta.content) >= 2  # really streamed
    assert all(k.usage is None for k in chunks[:-1])


def test_stream_without_usage_has_no_usage_chunk(server):
    chunks = list(client(server).chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0, stream=True))
    assert chunks[-1].choices[0].finish_reason is not None
    assert all(k.usage is None for k in chunks)


def test_completions(server):
    c = client(server)
    r = c.completions.create(model=MODEL_NAME, prompt="The capital of France is", max_tokens=4, temperature=0)
    assert r.object == "text_completion"
    assert "Paris" in r.choices[0].text
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 4
    chunks = list(c.completions.create(model=MODEL_NAME, prompt="The capital of France is", max_tokens=4,
                                       temperature=0, stream=True, stream_options={"include_usage": True}))
    assert "".join(k.choices[0].text for k in chunks if k.choices) == r.choices[0].text
    assert chunks[-1].usage.completion_tokens == 4
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens - 1
    # A prompt given as token ids.
    ids = c.completions.create(model=MODEL_NAME, prompt=[504, 3575, 282, 4649, 314], max_tokens=2, temperature=0)
    assert ids.usage.prompt_tokens == 5


@pytest.mark.parametrize("stream", [False, True])
def test_stop_strings_are_not_emitted(server, stream):
    c = client(server)
    prompt = "1, 2, 3, 4, 5,"
    free = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=8, temperature=0).choices[0].text
    assert free.startswith(" 6, 7, 8"), free
    # ", 7" spans three tokens (",", " ", "7"): nothing of it may appear.
    kw = dict(model=MODEL_NAME, prompt=prompt, max_tokens=8, temperature=0, stop=[", 7", "zzz"])
    if stream:
        chunks = list(c.completions.create(stream=True, **kw))
        text = "".join(k.choices[0].text for k in chunks)
        finish = chunks[-1].choices[0].finish_reason
    else:
        r = c.completions.create(**kw)
        text, finish = r.choices[0].text, r.choices[0].finish_reason
    assert text == " 6"
    assert finish == "stop"
    # A single stop string works too.
    r = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=8, temperature=0, stop=" 8")
    assert r.choices[0].text == " 6, 7,"


def test_penalties_and_seed_are_accepted(server):
    c = client(server)
    kw = dict(model=MODEL_NAME, prompt="Once upon a time", max_tokens=5, temperature=1.0, top_p=0.9, seed=1234)
    a = c.completions.create(**kw).choices[0].text
    b = c.completions.create(**kw).choices[0].text
    assert a == b  # same seed, same text
    r = c.completions.create(model=MODEL_NAME, prompt="1, 1, 1, 1, 1,", max_tokens=8, temperature=0,
                             frequency_penalty=2.0, presence_penalty=2.0)
    plain = c.completions.create(model=MODEL_NAME, prompt="1, 1, 1, 1, 1,", max_tokens=8, temperature=0)
    assert plain.choices[0].text.startswith(" 1")
    assert r.choices[0].text != plain.choices[0].text


PROMPTS = [
    "What is the capital of France?",
    "Name three colors.",
    "What is 2 + 2?",
    "Say hello in Spanish.",
    "What is the largest planet?",
    "Who wrote Hamlet?",
    "What do bees make?",
    "Name a fruit that is yellow.",
]


def test_eight_concurrent_streams_equal_sequential(server):
    c = client(server)

    def run(prompt):
        stream = c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": prompt}],
                                           max_tokens=6, temperature=0, stream=True)
        return "".join(k.choices[0].delta.content or "" for k in stream if k.choices)

    sequential = [run(p) for p in PROMPTS]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        concurrent_texts = list(pool.map(run, PROMPTS))
    assert concurrent_texts == sequential
    assert all(sequential)
    server.wait_metric("kvad_active_slots", lambda v: v == 0)
    # The request log (and its counter) follows the last byte sent.
    server.wait_metric('kvad_requests_total{endpoint="/v1/chat/completions",status="200"}', lambda v: v == 16)


def token_ids(text):
    """The model's ids for `text`, from `kvad tokenize` (no BOS)."""
    import os
    import subprocess
    from conftest import model_path
    out = subprocess.run([os.environ["KVAD_BINARY"], "tokenize", "-m", model_path(), "--text", text],
                         check=True, capture_output=True, text=True).stdout
    return [int(t) for t in out.split()]


def test_logit_bias_is_applied(server):
    c = client(server)
    kw = dict(model=MODEL_NAME, prompt="1, 1, 1, 1, 1,", max_tokens=6, temperature=0)
    plain = c.completions.create(**kw).choices[0].text
    assert plain.startswith(" 1")
    first = token_ids(plain)[0]  # " " (SmolLM2 splits digits off)
    # -100 bans the greedy first token: the text changes and never starts with it.
    banned = c.completions.create(logit_bias={str(first): -100}, **kw).choices[0].text
    assert banned != plain and first not in token_ids(banned)
    # +100 on a token makes it the only choice, even sampled at temperature 1.
    zebra = token_ids(" zebra")
    forced = c.completions.create(logit_bias={str(t): 100 for t in zebra[:1]}, seed=3,
                                  **{**kw, "temperature": 1.0}).choices[0].text
    piece = subprocess_detok(zebra[0])
    assert forced == piece * 6
    # The chat endpoint takes it too.
    r = c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                  temperature=0, logit_bias={str(zebra[0]): 100})
    assert r.choices[0].message.content == piece * 3


def subprocess_detok(tid):
    import os
    import subprocess
    from conftest import model_path
    return subprocess.run([os.environ["KVAD_BINARY"], "tokenize", "-m", model_path(), "--detokenize"],
                          input=str(tid), check=True, capture_output=True, text=True).stdout
