"""gpt-oss's Harmony format through kvad serve with the official `openai`
client: the tiny gpt_oss_mxfp4 GGUF (tools/convert_tiny_gguf.py; MXFP4
experts, gpt-oss's real chat template) writes, under a grammar, an analysis
message then a final one; the analysis must come back as
`reasoning_content` and the final message as `content`, whole and streamed
(its vocabulary spells the Harmony markers with ordinary tokens, which the
parser reads the same way)."""
import os

import pytest

openai = pytest.importorskip("openai", reason="the openai package is missing (run scripts/setup)")

from conftest import Server  # noqa: E402

MODEL = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf_tiny", "gpt_oss_mxfp4", "llama.cpp-f32.gguf")
REPLY = ("<|channel|>analysis<|message|>Think.<|end|>"
         "<|start|>assistant<|channel|>final<|message|>Paris.")
GRAMMAR = 'root ::= "' + REPLY.replace('"', '\\"') + '"'


@pytest.fixture(scope="module")
def hserver(tmp_path_factory):
    s = Server(["--model", MODEL, "--ctx-size", "2048"], str(tmp_path_factory.mktemp("harmony") / "server.log"))
    yield s
    s.stop()


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


MESSAGES = [{"role": "user", "content": "Capital?"}]


def test_analysis_is_reasoning_and_final_is_content(hserver):
    r = client(hserver).chat.completions.create(model="llama.cpp-f32", messages=MESSAGES, max_tokens=200,
                                                extra_body={"grammar": GRAMMAR})
    msg = r.choices[0].message
    assert msg.content == "Paris."
    assert msg.model_extra.get("reasoning_content") == "Think."


def test_streamed_deltas_split_the_same_way(hserver):
    stream = client(hserver).chat.completions.create(model="llama.cpp-f32", messages=MESSAGES, max_tokens=200, stream=True,
                                                     extra_body={"grammar": GRAMMAR})
    content, reasoning = "", ""
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        reasoning += (d.model_extra or {}).get("reasoning_content") or ""
    assert content == "Paris."
    assert reasoning == "Think."


def test_reasoning_format_none_keeps_the_reply_as_written(hserver):
    r = client(hserver).chat.completions.create(model="llama.cpp-f32", messages=MESSAGES, max_tokens=200,
                                                extra_body={"grammar": GRAMMAR, "reasoning_format": "none"})
    assert r.choices[0].message.content == REPLY


def test_a_request_the_template_cannot_render_is_a_400(hserver):
    # gpt-oss's real template reads every tool's description, which the API
    # makes optional: the request cannot be rendered, a 400 naming the error.
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    with pytest.raises(openai.BadRequestError) as e:
        client(hserver).chat.completions.create(model="llama.cpp-f32", messages=MESSAGES, max_tokens=8, tools=tools)
    assert "description" in str(e.value)
    # The server still answers.
    r = client(hserver).chat.completions.create(model="llama.cpp-f32", messages=MESSAGES, max_tokens=200,
                                                extra_body={"grammar": GRAMMAR})
    assert r.choices[0].message.content == "Paris."
