"""kvad serve's stateless POST /v1/responses driven by the official `openai`
client's responses.create: text streamed and not (the same text, the
documented event sequence), instructions, max_output_tokens, a function
call with tool_choice and its function_call_output round trip, and 400s for
what a stateless server cannot do."""
import json

import pytest

openai = pytest.importorskip("openai", reason="the openai package is missing (run scripts/setup)")

from conftest import MODEL_NAME, Server, model_path  # noqa: E402

WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TIME = {"type": "function", "name": "get_time", "description": "Get the local time in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if model_path() is None:
        pytest.skip("model %s not installed (run scripts/setup)" % MODEL_NAME)
    s = Server(["--parallel", "2", "--ctx-size", "1024"], str(tmp_path_factory.mktemp("responses") / "server.log"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    yield c
    c.close()


def test_text_not_streamed_and_streamed(client):
    kw = dict(model=MODEL_NAME, instructions="You answer in one short sentence.", input="Name a primary color.",
              max_output_tokens=12, temperature=0)
    r = client.responses.create(**kw)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.output_text
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.instructions == kw["instructions"] and r.max_output_tokens == 12
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
    events = list(client.responses.create(stream=True, **kw))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert kinds[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) >= 2 and "".join(deltas) == r.output_text
    assert events[-1].response.output_text == r.output_text
    assert events[-1].response.usage.output_tokens == r.usage.output_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_function_call_round_trip(client, stream):
    kw = dict(model=MODEL_NAME, input="What is the weather in Paris?", tools=[WEATHER, TIME], temperature=0,
              max_output_tokens=60, tool_choice={"type": "function", "name": "get_weather"})
    if stream:
        events = list(client.responses.create(stream=True, **kw))
        kinds = [e.type for e in events]
        assert "response.function_call_arguments.delta" in kinds
        done = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert len(done) == 1
        added = [e for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
        assert added[0].item.arguments == "" and added[0].item.name == "get_weather"
        deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        assert deltas == done[0].arguments
        r = events[-1].response
        assert kinds[-1] == "response.completed"
    else:
        r = client.responses.create(**kw)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    assert json.loads(call.arguments).get("city") == "Paris"
    # The result goes back in the next (stateless) request.
    r2 = client.responses.create(model=MODEL_NAME, tools=[WEATHER], tool_choice="none", temperature=0,
                                 max_output_tokens=30,
                                 input=[{"role": "user", "content": "What is the weather in Paris?"},
                                        {"type": "function_call", "call_id": call.call_id, "name": call.name,
                                         "arguments": call.arguments},
                                        {"type": "function_call_output", "call_id": call.call_id,
                                         "output": "18 C and sunny"}])
    assert r2.output_text
    assert not [o for o in r2.output if o.type == "function_call"]


def test_stateless_refusals(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL_NAME, input="hi", previous_response_id="resp_123")
    assert e.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL_NAME, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "http://x/y.png"}]}])
    assert e.value.body["code"] == "unsupported_value"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL_NAME, input="hi", max_output_tokens=0)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL_NAME, input=[])


def test_reasoning_item(client):
    # Few-shot turns that make SmolLM2 open its reply with <think>...</think>.
    items = [{"role": "user", "content": "What is 2+2?"},
             {"role": "assistant", "content": "<think>2 plus 2 is 4.</think>4"},
             {"role": "user", "content": "What is 3+3?"},
             {"role": "assistant", "content": "<think>3 plus 3 is 6.</think>6"},
             {"role": "user", "content": "What is 5+5?"}]
    kw = dict(model=MODEL_NAME, input=items, temperature=0, max_output_tokens=40,
              instructions="Always answer as <think>your reasoning</think> followed by the answer.")
    r = client.responses.create(**kw)
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == "5 plus 5 is 10."
    assert "think>" not in r.output_text
    events = list(client.responses.create(stream=True, **kw))
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == "5 plus 5 is 10."
    assert events[-1].response.output_text == r.output_text


@pytest.mark.parametrize("stream", [False, True])
def test_text_format_json_schema_is_enforced(client, stream):
    # text.format json_schema constrains the output as chat's response_format does.
    jsonschema = pytest.importorskip("jsonschema")
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "population": {"type": "integer", "minimum": 0}},
              "required": ["city", "population"], "additionalProperties": False}
    fmt = {"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}}
    for seed in range(3):
        kw = dict(model=MODEL_NAME, input="Name a big city and its population.", text=fmt, temperature=1.5,
                  extra_body={"seed": seed}, max_output_tokens=80)
        if stream:
            text = ""
            for ev in client.responses.create(stream=True, **kw):
                if ev.type == "response.output_text.delta":
                    text += ev.delta
                if ev.type == "response.completed":
                    assert ev.response.text.format.type == "json_schema"
        else:
            r = client.responses.create(**kw)
            text = r.output_text
            assert r.text.format.type == "json_schema"
        jsonschema.validate(json.loads(text), schema)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL_NAME, input="x", text={"format": {
            "type": "json_schema", "name": "n", "schema": {"type": "object", "patternProperties": {"(?=a)": {"type": "integer"}}}}})
    assert e.value.body["code"] == "invalid_schema" and "patternProperties" in e.value.body["message"]
