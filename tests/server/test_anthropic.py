"""kvad serve's POST /v1/messages driven by the official `anthropic` Python
client: text replies streamed and not (the same text), stop_sequences,
x-api-key, a tool_use round trip (tool_choice tool and any), and errors in
Anthropic's shape."""
import json

import pytest

anthropic = pytest.importorskip("anthropic", reason="the anthropic package is missing (run scripts/setup)")

from conftest import MODEL_NAME, Server, model_path  # noqa: E402

KEY = "sk-kvad-test-key"
WEATHER = {"name": "get_weather", "description": "Get the current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TIME = {"name": "get_time", "description": "Get the local time in a time zone",
        "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# This client has no sampling arguments (anthropic 2.x); kvad reads temperature from the body.
T0 = {"temperature": 0}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if model_path() is None:
        pytest.skip("model %s not installed (run scripts/setup)" % MODEL_NAME)
    s = Server(["--parallel", "2", "--ctx-size", "1024", "--api-key", KEY],
               str(tmp_path_factory.mktemp("anthropic") / "server.log"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    c = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)
    yield c
    c.close()


def test_text_not_streamed_and_streamed(client):
    kw = dict(model=MODEL_NAME, max_tokens=12, extra_body=T0, system="You answer in one short sentence.",
              messages=[{"role": "user", "content": "Name a primary color."}])
    m = client.messages.create(**kw)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.model == MODEL_NAME
    assert [b.type for b in m.content] == ["text"]
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0
    with client.messages.stream(**kw) as s:
        events = list(s)
        final = s.get_final_message()
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start"
    assert "content_block_start" in kinds and "content_block_stop" in kinds
    assert kinds[-1] == "message_stop"
    assert final.content[0].text == m.content[0].text
    assert final.stop_reason == m.stop_reason
    assert final.usage.output_tokens == m.usage.output_tokens
    assert sum(1 for e in events if e.type == "content_block_delta") >= 2  # really streamed


def test_stop_sequence(client):
    m = client.messages.create(model=MODEL_NAME, max_tokens=40, extra_body=T0, stop_sequences=["Paris"],
                               messages=[{"role": "user", "content": "What is the capital of France? Answer with one word."}])
    assert m.stop_reason == "stop_sequence"
    assert m.stop_sequence == "Paris"
    assert "Paris" not in (m.content[0].text if m.content else "")


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_round_trip(client, stream):
    kw = dict(model=MODEL_NAME, max_tokens=60, extra_body=T0, tools=[WEATHER, TIME], messages=ASK,
              tool_choice={"type": "tool", "name": "get_weather"})
    if stream:
        with client.messages.stream(**kw) as s:
            events = list(s)
            m = s.get_final_message()
        starts = [e for e in events if e.type == "content_block_start" and e.content_block.type == "tool_use"]
        assert len(starts) == 1
    else:
        m = client.messages.create(**kw)
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) == 1
    use = uses[0]
    assert use.id.startswith("toolu_") and use.name == "get_weather"
    assert use.input.get("city") == "Paris"
    # The result goes back; the model answers in text.
    msgs = ASK + [{"role": "assistant", "content": [b.model_dump() for b in m.content]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                "content": "18 C and sunny"}]}]
    r = client.messages.create(model=MODEL_NAME, max_tokens=30, extra_body=T0, tools=[WEATHER], messages=msgs,
                               tool_choice={"type": "none"})
    assert r.stop_reason in ("end_turn", "max_tokens")
    assert r.content and r.content[0].type == "text" and r.content[0].text


def test_tool_choice_any_single_tool(client):
    m = client.messages.create(model=MODEL_NAME, max_tokens=60, extra_body=T0, tools=[WEATHER], messages=ASK,
                               tool_choice={"type": "any"})
    assert m.stop_reason == "tool_use"
    assert json.loads(json.dumps(m.content[-1].input))["city"] == "Paris"


def test_errors_in_anthropic_shape(server, client):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL_NAME, max_tokens=0, messages=ASK)
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL_NAME, max_tokens=5, messages=[
            {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}])
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL_NAME, max_tokens=5, messages=ASK, tools=[WEATHER],
                               tool_choice={"type": "tool", "name": "nope"})
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=ASK)
    assert e.value.body["error"]["type"] == "not_found_error"
    bad = anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad.messages.create(model=MODEL_NAME, max_tokens=5, messages=ASK)
    assert e.value.body["error"]["type"] == "authentication_error"
    bad.close()
    # Missing max_tokens, raw.
    status, body = server.request("POST", "/v1/messages", {"model": MODEL_NAME, "messages": ASK},
                                  headers={"x-api-key": KEY})
    assert status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error"
