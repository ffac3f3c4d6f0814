"""logprobs from kvad serve against llama.cpp's (llama-cpp-python's
create_completion logprobs on the same GGUF; fixture by
tools/make_logprobs_reference.py), and the response shapes of both
endpoints, streamed and not, through the official `openai` client."""
import json
import math
import os

import pytest

openai = pytest.importorskip("openai", reason="the openai package is missing (run scripts/setup)")

from conftest import MODEL_NAME  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "logprobs", "smollm2-135m.json")
# test_reference allows 1.0 on logits; both engines use the file's quantized weights but
# quantize activations and sum in different orders.
LOGPROB_TOL = 1.0
MARGIN = 0.5  # below this gap between the best two, the engines may pick differently


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def test_completions_logprobs_equal_llama_cpp(server):
    ref = json.load(open(FIXTURE))
    c = client(server)
    worst, steps = 0.0, 0
    for case in ref["cases"]:
        r = c.completions.create(model=MODEL_NAME, prompt=case["prompt"], max_tokens=12, temperature=0, logprobs=5)
        lp = r.choices[0].logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
        assert "".join(lp.tokens) == r.choices[0].text
        # text_offset counts from the start of the prompt (llama-cpp-python's convention).
        assert lp.text_offset[0] == len(case["prompt"])
        for k, step in enumerate(case["steps"]):
            # Steps up to here had the same tokens: this step's distribution
            # comes from the same prefix in both engines.
            ours = sorted(lp.top_logprobs[k].items(), key=lambda kv: -kv[1])
            assert len(ours) == 5
            theirs = dict(step["top"])
            for tok, v in ours:
                if tok in theirs:
                    d = abs(v - theirs[tok])
                    worst = max(worst, d)
                    assert d <= LOGPROB_TOL, (case["prompt"], k, tok, v, theirs[tok])
            # Top-k order equal where the margins allow.
            for i in range(len(step["top"]) - 1):
                if step["top"][i][1] - step["top"][i + 1][1] >= MARGIN:
                    assert ours[i][0] == step["top"][i][0], (case["prompt"], k, i)
            if step["margin"] < MARGIN:
                break  # a near-tie: the continuations may part here
            assert lp.tokens[k] == step["token"], (case["prompt"], k)
            steps += 1
            d = abs(lp.token_logprobs[k] - step["logprob"])
            worst = max(worst, d)
            assert d <= LOGPROB_TOL, (case["prompt"], k, lp.token_logprobs[k], step["logprob"])
            assert math.isclose(sum(math.exp(v) for _, v in ours), sum(math.exp(v) for _, v in step["top"]),
                                abs_tol=0.05)
    print("max |logprob kvad - llama.cpp| = %.4f over %d steps" % (worst, steps))


def test_chat_logprobs_shapes_streamed_and_not(server):
    c = client(server)
    kw = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "Say hi."}], max_tokens=8, temperature=0,
              logprobs=True, top_logprobs=3)
    r = c.chat.completions.create(**kw)
    content = r.choices[0].logprobs.content
    assert content and "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.logprob <= 0 and bytes(t.bytes) == t.token.encode()
        assert len(t.top_logprobs) == 3
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
        assert t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == t.logprob  # greedy
    streamed = []
    text = ""
    for ch in c.chat.completions.create(stream=True, **kw):
        if ch.choices and ch.choices[0].logprobs:
            streamed += ch.choices[0].logprobs.content
        if ch.choices and ch.choices[0].delta.content:
            text += ch.choices[0].delta.content
    assert text == r.choices[0].message.content
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in content]
    # Without logprobs: null; top_logprobs without logprobs: 400.
    plain = c.chat.completions.create(model=MODEL_NAME, messages=kw["messages"], max_tokens=2)
    assert plain.choices[0].logprobs is None
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL_NAME, messages=kw["messages"], max_tokens=2, top_logprobs=2)
    assert e.value.code == "invalid_value" and e.value.param == "top_logprobs"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL_NAME, messages=kw["messages"], max_tokens=2, logprobs=True,
                                  top_logprobs=21)
    assert e.value.param == "top_logprobs"


def test_logprobs_follow_logit_bias(server):
    # After the bias, as OpenAI computes them: a +100 token is certain.
    c = client(server)
    r = c.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=2, temperature=0, logprobs=1,
                             logit_bias={"28": 100})
    assert all(v > -1e-3 for v in r.choices[0].logprobs.token_logprobs)
